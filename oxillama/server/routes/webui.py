"""GET /: a chat page in one dependency-free HTML file (oxillama/server/static/index.html), as
llama.cpp's server has a web UI. It talks to the same API as any client (/props for the model's name,
/v1/chat/completions streamed), with the API key the user types, if the server has one."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

public = APIRouter()


@lru_cache(maxsize=1)
def page() -> str:
    return resources.files("oxillama.server").joinpath("static/index.html").read_text(encoding="utf-8")


@public.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index():
    return HTMLResponse(page(), headers={"Cache-Control": "no-cache"})
