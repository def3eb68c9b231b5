"""The demo model served over https with a given certificate (a test fixture process).

python -m tests.models.tls_model PORT CERT KEY
"""

from __future__ import annotations

import asyncio
import signal
import ssl
import sys

from aiohttp import web

from proctor.demo import DemoModelConfig
from proctor.demo.server import DemoModel


async def serve(port: int, cert: str, key: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    runner = web.AppRunner(DemoModel(DemoModelConfig()).app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    print(f"serving https://127.0.0.1:{port}/v1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
