"""Example workflows (run with ``python -m workflows run workflows/examples/NAME.py``)."""
