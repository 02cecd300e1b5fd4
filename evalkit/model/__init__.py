"""msgspec Structs: the single definition of every wire object."""
