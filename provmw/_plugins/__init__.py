"""What the plugin host is made of: provmw's own built-in plugin, and what a hook contributed."""
