"""schemathesis hooks of tests/schemathesis/run.py: the runtime rules of a
create (and plan) request that no JSON Schema can state.

A create names objects that must exist (a base model in models_dir, the
caller's uploaded files) and its options must give a job whose memory plan
fits the device; OpenAI's API and tacod answer 400 otherwise, and the spec
says so, but a generator that reads only the schema sends random names and
sizes, so nearly every schema-valid create would be refused for a reason
that is not the schema's. Before such a request is sent:

- a `model`, `training_file` or `validation_file` whose value is valid for
  its schema is replaced by a real one (TACO_ST_MODELS, TACO_ST_FILES),
  picked by a hash of the generated value so that a case always maps to
  the same request; a file of the kind the method trains on (a dpo job's
  preference pairs are TACO_ST_PAIR_FILES, every other job's examples
  TACO_ST_FILES: the other kind is 400 `invalid_training_file`). A value that is not valid for its schema is left as it
  is: that is what a negative case tests. So a positive case stays positive
  and a negative one negative.
- in a positive case only: a hyperparameter given both at the top level
  and in `method.<type>.hyperparameters` gets method's value in both
  (different values are 400 `conflicting_hyperparameters`);
  `batch_size` x `taco.seq_len` (twice that for dpo, whose `batch_size`
  counts pairs of two sequences) is brought under
  1,048,576 tokens (the engine's rule across two options), and for a create
  (not a plan, which answers 200 for a job that does not fit) under
  TACO_ST_MAX_TOKENS tokens per micro-batch so that the plan fits the test's
  `device_memory`; `taco.freeze` (prefixes that must name tensors of the
  model) is emptied; `taco.chat_template` is `auto` beside a
  `taco.chat_template_jinja` (the job's own template takes the place of
  the model's: a built-in beside it is 400, the engine's rule across two
  options); `taco.gpus` above 1 is brought to the largest divisor
  of `batch_size` not above it (each GPU takes an equal slice of every
  batch: the engine's rule across two options), and to 1 for a create or
  a dpo job (the test's tacod has one device, so more is 400
  `insufficient_gpus`, which a plan answers with 200 and `fits` false; dpo
  runs on one GPU); `taco.router_aux_loss_coef` above 0 is brought to 0
  (the test's models have no experts, and a mixture of experts' auxiliary
  loss on a model without experts is 400 `invalid_model`: the engine's
  rule across the model and the option); a key holding a NUL character
  inside `taco.chat_template_kwargs`'s values is dropped (tacod's JSON
  parser, Jansson, holds no NUL in an object key and answers 400 for any
  body with one; a JSON Schema cannot state that for every object nested
  in free-form values). Values stay within their schemas.

Nothing else is touched: every other field goes out as generated.
"""

import os
import re
import zlib

import schemathesis
from schemathesis.core.parameters import ParameterLocation

MODELS = [m for m in os.environ.get("TACO_ST_MODELS", "").split(",") if m]
FILES = [f for f in os.environ.get("TACO_ST_FILES", "").split(",") if f]
PAIR_FILES = [f for f in os.environ.get("TACO_ST_PAIR_FILES", "").split(",") if f]
MAX_TOKENS = int(os.environ.get("TACO_ST_MAX_TOKENS", "4096"))
ENGINE_MAX_TOKENS = 1 << 20
MODEL_RE = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._-]{1,255}$")  # a base model's name: not "." or ".."
OPERATIONS = {("POST", "/v1/fine_tuning/jobs"): "create", ("POST", "/v1/fine_tuning/plan"): "plan"}


def pick(values, seed):
    return values[zlib.crc32(repr(seed).encode()) % len(values)]


FILE_RE = re.compile(r"^[A-Za-z0-9_-]{1,63}$")


def data_file_valid(v):
    """Valid for the spec's DataFile: a file id, or an absolute path."""
    return isinstance(v, str) and (bool(FILE_RE.match(v)) or (v.startswith("/") and len(v) <= 4095))


def integer(v):
    """v as an int when JSON Schema counts it an integer (5 and 5.0), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        return None
    return int(v) if v == int(v) else None


def method_type(body):
    """The request's method.type when it is a string, else None."""
    method = body.get("method")
    t = method.get("type") if isinstance(method, dict) else None
    return t if isinstance(t, str) else None


def own_hyperparameters(body):
    """method.<type>.hyperparameters, or None."""
    method = body.get("method") if isinstance(body.get("method"), dict) else {}
    own = method.get(method_type(body) or "supervised")
    return own.get("hyperparameters") if isinstance(own, dict) else None


def agree_hyperparameters(body):
    """The top level's hyperparameters take method's values where both have one."""
    top = body.get("hyperparameters")
    own = own_hyperparameters(body)
    if isinstance(top, dict) and isinstance(own, dict):
        body["hyperparameters"] = {k: own.get(k, v) for k, v in top.items()}


def batch_size(body):
    """The sequences of a micro-batch the request resolves to: method's
    batch_size over the top level's, 4 for "auto", two a pair for dpo."""
    size = 4
    for h in (body.get("hyperparameters"), own_hyperparameters(body)):
        if isinstance(h, dict) and integer(h.get("batch_size")) is not None:
            size = integer(h["batch_size"])
    return max(size, 1) * (2 if method_type(body) == "dpo" else 1)


def drop_nul_keys(v):
    """v with every object key that holds a NUL character dropped, at
    any depth."""
    if isinstance(v, dict):
        return {k: drop_nul_keys(x) for k, x in v.items() if "\x00" not in k}
    if isinstance(v, list):
        return [drop_nul_keys(x) for x in v]
    return v


@schemathesis.hook
def before_call(context, case, kwargs):
    kind = OPERATIONS.get((case.operation.method.upper(), case.operation.path))
    body = case.body
    if kind is None or not isinstance(body, dict) or not MODELS or not FILES:
        return
    meta = case.meta
    positive = meta is None or not meta.is_negative_at(ParameterLocation.BODY)
    body = dict(body)
    if isinstance(body.get("model"), str) and MODEL_RE.match(body["model"]):
        body["model"] = pick(MODELS, body["model"])
    files = PAIR_FILES if method_type(body) == "dpo" and PAIR_FILES else FILES
    for key in ("training_file", "validation_file"):
        if data_file_valid(body.get(key)):
            body[key] = pick(files, body[key])
    if positive:
        agree_hyperparameters(body)
    taco = body.get("taco")
    if positive and isinstance(taco, dict):
        taco = dict(taco)
        cap = ENGINE_MAX_TOKENS if kind == "plan" else MAX_TOKENS
        seq_len = 1024 if taco.get("seq_len") is None else integer(taco["seq_len"])  # null: the default
        if seq_len is not None and batch_size(body) * seq_len > cap:
            taco["seq_len"] = max(2, cap // batch_size(body))
        if taco.get("freeze"):
            taco["freeze"] = []
        if isinstance(taco.get("chat_template_jinja"), str) and taco.get("chat_template") not in (None, "auto"):
            taco["chat_template"] = "auto"
        coef = taco.get("router_aux_loss_coef")
        if isinstance(coef, (int, float)) and not isinstance(coef, bool) and coef > 0:
            taco["router_aux_loss_coef"] = 0
        if isinstance(taco.get("chat_template_kwargs"), dict):
            taco["chat_template_kwargs"] = drop_nul_keys(taco["chat_template_kwargs"])
        gpus = integer(taco.get("gpus"))
        if gpus is not None and gpus > 1:
            if kind == "create" or method_type(body) == "dpo":
                taco["gpus"] = 1
            else:
                taco["gpus"] = max(d for d in range(1, gpus + 1) if batch_size(body) % d == 0)
        body["taco"] = taco
    elif positive and kind == "create" and batch_size(body) * 1024 > MAX_TOKENS:
        body["taco"] = {"seq_len": max(2, MAX_TOKENS // batch_size(body))}
    case.body = body
