"""The OpenAI layer, shared by the HTTP server (oxillama.server) and the llama-cpp-python face
(oxillama.Llama): neither builds OpenAI shapes of its own.

- request.py: a request's fields -> generate() / Scheduler.submit() keywords.
- chat.py: chat messages and tools -> prompt and forcing grammar; tool calls read back, whole or streamed.
- shapes.py: response bodies as plain dicts (completion, chat, chunk, embedding), usage, logprobs.
- stream.py: one streamed choice's pieces -> its chunks' choice dicts, logprobs included.

Nothing here imports pydantic, FastAPI or the engine.
"""
