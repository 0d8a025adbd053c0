"""Ring: the versioned msgpack ring buffer and the records that travel through it."""
