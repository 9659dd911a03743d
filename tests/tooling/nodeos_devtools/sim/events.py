"""Kinds of events on the simulator's queue."""

TICK, DELIVER, SYNC, CLIENT, FAULT, RESTART, HEAL, SETTLE, FINAL, CRASH, REJOIN, DONE = range(12)
