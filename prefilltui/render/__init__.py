"""Rendering: views of the model's results as text, SVG and HTML. Imports only the model."""
