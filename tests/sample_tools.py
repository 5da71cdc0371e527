"""Tools in the OpenAI chat-completions shape that the tool-calling tests of oxillama.Llama
(tests/compat) and of the server (tests/server) both offer the model."""
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}
CONVERT = {"type": "function", "function": {
    "name": "convert_currency", "description": "Convert an amount between currencies",
    "parameters": {"type": "object", "properties": {
        "amount": {"type": "number"}, "from": {"type": "string", "maxLength": 3},
        "to": {"type": "string", "maxLength": 3}}, "required": ["amount", "from", "to"]}}}
