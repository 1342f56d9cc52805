"""JSON as a type: what every ``to_json()`` returns and every run-file line is."""

from __future__ import annotations

from typing import Union

#: A JSON value as ``json.dumps`` takes it.
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]
#: A JSON object (a run-file line, a summary, an HTTP body).
JsonObject = dict[str, Json]
