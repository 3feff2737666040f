"""Schemathesis hooks for the dashboard's management API (loaded by schemathesis.sh)."""

import schemathesis

# A streaming API definition is JSON (or YAML) under the dashboard's own media type.
schemathesis.serializer.alias("application/vnd.sluice.streams.oas", "application/json")
