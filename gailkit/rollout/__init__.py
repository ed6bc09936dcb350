"""The actor side: one actor stepping envs with a CPU policy copy (`actor`), the wire format (`wire`), the
ZeroMQ transport (`transport`) and the fleets that hand out slots (`fleet`). Never imports `algo`."""
