"""fedjax_rl's ClientApp and ServerApp, as Flower's app layout names them."""
