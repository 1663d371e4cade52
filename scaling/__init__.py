"""scaling: plan, train, record, fit and report scaling-law sweeps of language models."""

__version__ = "0.1.0"
