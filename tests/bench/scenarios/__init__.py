"""One file per benchmark scenario. Each exposes NAME, TRANSPORTS (the fleets it runs
on: "plain", "mtls") and run(ctx) -> dict of figures. tests/bench/run calls them in
the order of ORDER below; a new scenario is a new file plus its name here."""
ORDER = ["density", "round_trip", "round_trip_stream", "pipelined", "pipelined_stream", "fanout",
         "fanout_set", "storm"]
