"""The console CLI `nodeos`: a pure client of the daemon's API (plus local `net` commands)."""
