"""Web pages, one module per area; each exports ``PAGES``."""
