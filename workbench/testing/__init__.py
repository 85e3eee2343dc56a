"""What tests and long runs use to try the workbench, not what a user's pipeline runs:
the differential fuzzers (``fuzz``: random graphs of four families and random plans,
every kernel against NumPy; ``python -m workbench.testing.fuzz``) and the model zoo
(``zoo``: small Hugging Face models exported as users export them)."""
