"""Networks and the spaces they take: which spaces are supported (`spaces`), the encoder factory
(`encoders`), and the actor-critic policy built on them (`policy`)."""
