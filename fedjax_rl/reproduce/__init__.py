"""The paper's tables as runnable requests: their declarations (`tables`, `paper`), a request and its
plan (`plan`), the harness that runs and resumes rows in seed pieces (`harness`, `seed_pieces`,
`status`, `costs`, `executor`) and the reports that judge them (`report`, `heterogeneity`, `attacks`)."""
