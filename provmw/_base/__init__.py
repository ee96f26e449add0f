"""The ground floor: helpers that import nothing of provmw but its errors (strict JSON, typed
field reads, bounded name maps, the two timer helpers, where provmw keeps its files)."""
