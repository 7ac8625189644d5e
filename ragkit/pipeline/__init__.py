"""The engine: the `Features` config, the graph it compiles to, the result, the trace."""
