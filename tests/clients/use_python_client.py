"""Uses a client that openapi-python-client generated from the service's /openapi.json, as an
integrator would (tests/it/clients.rs runs it; D38 addendum).

    python3 use_python_client.py BASE_URL API_KEY|token:ACCESS_TOKEN OPENAPI_JSON

For every interface path of the document: its documented example is parsed into the
generated request model and sent (202, a Result), then sent as a dry run (200), and its receipt
read (a Receipt of ReceiptRecords). Then an invalid GL code record, built from the generated
types, gets 400 with its typed error list. Prints one line per check; exits 1 at the first
failure.
"""

import importlib
import json
import re
import sys

from ap_intake_client import AuthenticatedClient, models
from ap_intake_client.api.receipts import request_receipt
from ap_intake_client.api.intake import general_ledger_codes_v1


def snake(operation_id):
    """openapi-python-client's module name for an operationId."""
    return re.sub(r"[^a-z0-9]+", "_", operation_id.lower()).strip("_")


def check(ok, what):
    if not ok:
        print(f"FAILED: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def component(ref):
    return ref.rsplit("/", 1)[-1]


def canonical(doc, op):
    """The interface's own path: an alias path's operationId is the interface's plus -alias."""
    own = op["operationId"].split("-alias")[0]
    return next(p for p, i in doc["paths"].items() if i.get("post", {}).get("operationId") == own)


def main(base_url, key, document):
    doc = json.load(open(document))
    if key.startswith("token:"):
        # An OAuth 2.0 access token (D47): the client's default, Authorization: Bearer.
        client = AuthenticatedClient(base_url=base_url, token=key.removeprefix("token:"))
    else:
        # The API key header, as README "A generated client" shows it.
        client = AuthenticatedClient(
            base_url=base_url, token=key, auth_header_name="x-api-key", prefix=""
        )
    for path, item in doc["paths"].items():
        op = item.get("post")
        if op is None or path.startswith("/validate/"):
            continue
        body_ref = component(op["requestBody"]["$ref"])
        body_doc = doc["components"]["requestBodies"][body_ref]["content"]["application/json"]
        request_model = getattr(models, component(body_doc["schema"]["$ref"]))
        example = body_doc["example"]
        n = len(example["objects"]["object"]["record"])
        kwargs = {"body": request_model.from_dict(example)}
        if any("AccountingType" in p.get("$ref", "") for p in op["parameters"]):
            kwargs["accounting_type"] = models.AccountingType(
                doc["components"]["schemas"]["AccountingType"]["enum"][0]
            )

        intake = importlib.import_module(f"ap_intake_client.api.intake.{snake(op['operationId'])}")
        r = intake.sync_detailed(client=client, **kwargs)
        check(
            r.status_code == 202
            and isinstance(r.parsed, models.Result)
            and r.parsed.status == models.ResultStatus.SUCCESS
            and r.parsed.succeeded == n,
            f"{path}: the example is queued (202, {n} record(s)): {r.status_code} {r.content[:300]!r}",
        )
        request_id = r.headers["x-request-id"]

        dry_id = doc["paths"][f"/validate{path}"]["post"]["operationId"]
        dry = importlib.import_module(f"ap_intake_client.api.dry_run.{snake(dry_id)}")
        r = dry.sync_detailed(client=client, **kwargs)
        check(
            r.status_code == 200
            and isinstance(r.parsed, models.Result)
            and r.parsed.message == f"{n} record(s) valid, none queued",
            f"{path}: the dry run answers 200: {r.status_code} {r.content[:300]!r}",
        )

        r = request_receipt.sync_detailed(request_id=request_id, client=client)
        check(
            r.status_code == 200
            and isinstance(r.parsed, models.Receipt)
            and r.parsed.interface == canonical(doc, op)
            and len(r.parsed.records) == n
            and all(isinstance(rec, models.ReceiptRecord) for rec in r.parsed.records)
            and all(isinstance(rec.state, models.ReceiptState) for rec in r.parsed.records),
            f"{path}: the receipt lists the records: {r.status_code} {r.content[:300]!r}",
        )

    record = models.GeneralLedgerCodesV1Record(
        code="", type_=models.GeneralLedgerCodesV1Type.DEDUCTABLE, description_en="Office supplies"
    )
    body = models.GeneralLedgerCodesV1Request(
        objects=models.GeneralLedgerCodesV1Objects(
            object_=models.GeneralLedgerCodesV1Object(record=[record])
        )
    )
    r = general_ledger_codes_v1.sync_detailed(client=client, body=body)
    check(
        r.status_code == 400
        and isinstance(r.parsed, models.Result)
        and r.parsed.status == models.ResultStatus.FAILED
        and all(isinstance(e, models.ErrorEntry) for e in r.parsed.errors)
        and [(e.index, e.path) for e in r.parsed.errors] == [(0, "/code")],
        f"an invalid record gets 400 and a typed error list: {r.status_code} {r.content[:300]!r}",
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
