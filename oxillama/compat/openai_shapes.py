"""Moved to oxillama.openai (shapes.py and chat.py): kept so that older imports still work."""
from oxillama.openai.chat import ChatDeltas, ChatPlan, chat_plan  # noqa: F401
from oxillama.openai.shapes import *  # noqa: F401,F403
from oxillama.openai.shapes import MIN_LOGPROB, StreamedLogprobs  # noqa: F401
