"""The world model: network, conditioning, EDM math, sampler and the world-model env."""
