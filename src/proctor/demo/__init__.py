"""The demo model: a scripted, OpenAI-compatible stand-in for a real model endpoint.

It serves `POST /v1/chat/completions` and `GET /v1/models` on loopback, answering the
built-in environments' tasks mostly right with seeded mistakes. Start it with
`proctor demo-model`, or in-process with `start_server(DemoModelConfig(port=0))`.
"""

from proctor.demo.policy import respond
from proctor.demo.server import DemoModel, DemoModelConfig, serve, start_server

__all__ = ["DemoModel", "DemoModelConfig", "respond", "serve", "start_server"]
