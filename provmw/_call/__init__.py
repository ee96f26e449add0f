"""What one call is made of between the manager and the adapter: its arguments, the ad-hoc
configuration's credentials, and the terminal (the innermost step of the onion)."""
