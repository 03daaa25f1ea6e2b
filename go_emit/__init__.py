"""Go emission: any validated program becomes a BLIS LatencyModel."""
