"""Placement of the op graph onto memory-limited devices (Baechi m-TOPO, m-ETF, m-SCT)."""
