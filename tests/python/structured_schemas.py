"""Twenty JSON Schemas for the structured-output tests: nested objects, arrays, enums, required and optional
properties, $ref/$defs, anyOf, string formats, integer ranges, and a few pydantic models (the shape the openai
SDK's .parse() sends). A validator checks formats too."""
import enum
from typing import List, Literal, Optional

import jsonschema
import pydantic

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def validate(instance, schema):
    jsonschema.validate(instance, schema, cls=jsonschema.Draft202012Validator, format_checker=FORMAT_CHECKER)


SCHEMAS = {
    "person": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0,
               "maximum": 150}}, "required": ["name", "age"], "additionalProperties": False},
    "optional_fields": {"type": "object", "properties": {"title": {"type": "string"}, "subtitle": {"type": "string"},
                        "pages": {"type": "integer"}}, "required": ["title"]},
    "enum_color": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    "array_of_strings": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                         "maxItems": 5}}, "required": ["tags"]},
    "nested_address": {"type": "object", "properties": {"name": {"type": "string"}, "address": {"type": "object",
                       "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                      "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                       "required": ["street", "city", "zip"], "additionalProperties": False}},
                       "required": ["name", "address"], "additionalProperties": False},
    "defs_ref": {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                 "required": ["x", "y"]}}, "type": "object", "properties": {"start": {"$ref": "#/$defs/point"},
                 "end": {"$ref": "#/$defs/point"}}, "required": ["start", "end"]},
    "any_of": {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "string",
               "maxLength": 10}, {"type": "null"}]}}, "required": ["value"]},
    "formats": {"type": "object", "properties": {"day": {"type": "string", "format": "date"},
                "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"}},
                "required": ["day", "when", "id"]},
    "email": {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}, "required": ["email"]},
    "ipv4": {"type": "object", "properties": {"host": {"type": "string", "format": "ipv4"}}, "required": ["host"]},
    "integer_ranges": {"type": "object", "properties": {"small": {"type": "integer", "minimum": -5, "maximum": 5},
                       "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                       "positive": {"type": "integer", "exclusiveMinimum": 0}}, "required": ["small", "year", "positive"]},
    "array_of_objects": {"type": "object", "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3,
                         "items": {"type": "object", "properties": {"sku": {"type": "string"},
                                   "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                                   "required": ["sku", "qty"]}}}, "required": ["items"]},
    "booleans_and_null": {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": ["string",
                          "null"]}}, "required": ["ok", "note"]},
    "string_lengths": {"type": "object", "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 6}},
                       "required": ["code"]},
    "recursive_tree": {"$defs": {"node": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 8},
                       "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}},
                       "required": ["label"]}}, "$ref": "#/$defs/node"},
    "top_level_array": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
}


class Unit(str, enum.Enum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Weather(pydantic.BaseModel):
    city: str
    temperature: float
    unit: Unit


class Step(pydantic.BaseModel):
    explanation: str
    output: str


class MathAnswer(pydantic.BaseModel):
    steps: List[Step]
    final_answer: str


class Event(pydantic.BaseModel):
    name: str
    kind: Literal["meeting", "call", "trip"]
    attendees: List[str]
    location: Optional[str]


class Inventory(pydantic.BaseModel):
    warehouse: str
    counts: List[int]
    audited: bool


MODELS = {"weather": Weather, "math": MathAnswer, "event": Event, "inventory": Inventory}

assert len(SCHEMAS) + len(MODELS) == 20
