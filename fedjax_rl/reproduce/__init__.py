"""The paper's tables as runnable requests: their declarations (`tables`, `paper`), the harness that
plans, runs and resumes rows in seed pieces (`harness`, `seed_pieces`, `costs`, `executor`) and the
reports that judge them (`report`, `heterogeneity`)."""
