"""OpenAI error objects for every failure: {"error": {"message", "type", "param", "code"}}, with code a
string as OpenAI sends it ("invalid_api_key", "context_length_exceeded", ...) or null; the HTTP status
says the rest (OpenAI's clients pick their exception class from it). Registered once as exception handlers, so
endpoints raise and never build error bodies; a bad input is never a 500, and no body carries a
traceback."""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from oxillama import errors as ox
from oxillama.server.protocol.common import ErrorInfo, ErrorResponse

log = logging.getLogger("oxillama")


# OpenAI's `code` for the error types that have one; the others send null
ERROR_CODES = {
    "authentication_error": "invalid_api_key",
    "exceed_context_size_error": "context_length_exceeded",
    "rate_limit_error": "rate_limit_exceeded",
}


class APIError(Exception):
    """An error the server answers with a given status and OpenAI error type (and code, if not the type's)."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers


def error_body(status: int, message: str, type: str, param: str | None = None, code: str | None = None) -> dict:
    """The OpenAI error object; `status` is the HTTP status it goes with (not a field of the body)."""
    info = ErrorInfo(message=message, type=type, param=param, code=code or ERROR_CODES.get(type))
    return ErrorResponse(error=info).model_dump()


def error_response(status: int, message: str, type: str, param: str | None = None, headers=None,
                   code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, type, param, code), status_code=status, headers=headers)


# Anthropic's error types for ours (its API answers overload with "overloaded_error")
_ANTHROPIC_TYPES = {"invalid_request_error": "invalid_request_error", "exceed_context_size_error":
                    "invalid_request_error", "authentication_error": "authentication_error",
                    "permission_error": "permission_error", "not_found_error": "not_found_error",
                    "rate_limit_error": "rate_limit_error"}
ANTHROPIC_PATHS = ("/v1/messages",)


def anthropic_error_body(status: int, message: str, type: str) -> dict:
    """Anthropic's error object: {"type": "error", "error": {"type", "message"}}."""
    if status == 413:
        kind = "request_too_large"
    else:
        kind = _ANTHROPIC_TYPES.get(type) or ("overloaded_error" if status == 503 else
                                              "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_response_for(path: str, status: int, message: str, type: str, param: str | None = None,
                       headers=None, code: str | None = None) -> JSONResponse:
    """The error in the shape of the API family that `path` belongs to (Anthropic's or OpenAI's)."""
    if path.startswith(ANTHROPIC_PATHS):
        return JSONResponse(anthropic_error_body(status, message, type), status_code=status, headers=headers)
    return error_response(status, message, type, param, headers, code)


def classify(exc: BaseException) -> tuple[int, str]:
    """(HTTP status, OpenAI error type) for an exception from the engine or the scheduler."""
    if isinstance(exc, (ox.ContextOverflowError, ox.KVPoolExhaustedError)):
        # (the pool error escapes submit() only for a request larger than the whole KV pool)
        return 400, "exceed_context_size_error"
    if isinstance(exc, ox.QueueFullError):
        return 429, "rate_limit_error"
    if isinstance(exc, ox.SchedulerStoppedError):
        return 503, "server_error"
    if isinstance(exc, (ox.InvalidArgumentError, ox.GrammarError, ox.TokenizerError, ValueError)):
        return 400, "invalid_request_error"
    return 500, "server_error"


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    parts = []
    param = None
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        where = ".".join(loc) if err.get("type") != "json_invalid" else ""
        if param is None and where:
            param = where
        if err.get("type") == "json_invalid":
            parts.append(f"the body is not valid JSON: {err.get('msg')}")
        elif not where:
            parts.append("the body must be a JSON object (sent with Content-Type: application/json)")
        else:
            parts.append(f"{where or 'body'}: {err.get('msg')}")
    return "; ".join(parts[:5]) or "invalid request body", param


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        if exc.headers:
            headers = {**(headers or {}), **exc.headers}
        return error_response_for(request.url.path, exc.status, exc.message, exc.type, exc.param, headers, exc.code)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        message, param = _validation_message(exc)
        return error_response_for(request.url.path, 400, message, "invalid_request_error", param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error_response_for(request.url.path, exc.status_code, str(exc.detail), kind,
                                  headers=getattr(exc, "headers", None))

    @app.exception_handler(ox.OxillamaError)
    async def _oxillama(request: Request, exc: ox.OxillamaError):
        status, kind = classify(exc)
        if status >= 500:
            log.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return error_response_for(request.url.path, status, str(exc), kind)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response_for(request.url.path, 500, f"internal error ({type(exc).__name__}); see the server log", "server_error")
