"""Ready-made flows: ``python -m workflows run workflows.flows.NAME -- ...``."""
