"""Request and response bodies of the HTTP API as pydantic models, one module per API family
(common shapes, legacy completions, chat completions, embeddings, tokenize/detokenize). Numbers are
strict (a string "0.7" is not a temperature) and unknown fields are ignored, as OpenAI clients send
fields this server has no use for (user, metadata, store, ...)."""
