"""The ClientApp: one agent of the run the server describes, in this node's own environment
(its node configuration: `partition-id` is the agent index, any other key a physics scale)."""

from fedjax_rl.flower.apps import client_app

app = client_app()
