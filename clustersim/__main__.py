"""``python -m clustersim`` runs the CLI."""

from clustersim.cli import app

app()
