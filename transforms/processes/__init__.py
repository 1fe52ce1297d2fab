"""Pure: processes a local run starts (no Beam)."""
