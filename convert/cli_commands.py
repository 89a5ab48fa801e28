"""Commands beyond inspect (registered on the same Typer app)."""
