"""What a person sees: notebook panel, plots, HTML tables and the command line."""
