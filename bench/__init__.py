"""Benchmarks: ``python -m bench <name> [args]`` runs ``bench/<name>.py``'s ``main(argv)``."""
