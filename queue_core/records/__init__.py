"""Records: the data that crosses boundaries -- jobs, attempts, dead letters, flow
executions, workers -- with the exception tree and durations. The lowest layer: imports
only the standard library and itself."""
