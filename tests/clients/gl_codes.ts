// Uses openapi-fetch with the types openapi-typescript generated from the service's
// /openapi.json (schema.d.ts beside this file), as an integrator would: tests/it/clients.rs
// compiles it with `tsc --strict` and runs it (D38 addendum).
//
//     node gl_codes.js BASE_URL API_KEY|token:ACCESS_TOKEN
//
// Sends a GL code record (202), an invalid one (400 with its typed error list), a dry run
// (200), and reads the receipt. Prints one line per check; exits 1 at the first failure.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type GlRecord = components["schemas"]["GeneralLedgerCodesV1Record"];
type GlRequest = components["schemas"]["GeneralLedgerCodesV1Request"];

function check(ok: boolean, what: string): void {
  if (!ok) {
    console.log(`FAILED: ${what}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

async function main(baseUrl: string, key: string): Promise<void> {
  // An API key, or an OAuth 2.0 access token passed as token:<jwt> (D47).
  const headers: Record<string, string> = key.startsWith("token:")
    ? { Authorization: `Bearer ${key.slice("token:".length)}` }
    : { "x-api-key": key };
  const client = createClient<paths>({ baseUrl, headers });
  const record: GlRecord = { code: "4000", type: "DEDUCTABLE", description_en: "Office supplies" };
  const body: GlRequest = { objects: { object: { record: [record] } } };

  const sent = await client.POST("/general-ledger-codes/v1", { body });
  check(
    sent.response.status === 202 && sent.data?.status === "SUCCESS" && sent.data.succeeded === 1,
    `the record is queued: ${sent.response.status}`,
  );
  const requestId = sent.response.headers.get("x-request-id") ?? "";

  const invalid: GlRequest = { objects: { object: { record: [{ ...record, code: "" }] } } };
  const refused = await client.POST("/general-ledger-codes/v1", { body: invalid });
  const error = refused.error;
  const errors = error !== undefined && "errors" in error ? error.errors : [];
  check(
    refused.response.status === 400 && errors.length === 1 && errors[0].path === "/code",
    `an invalid record gets 400 and its error list: ${JSON.stringify(error)}`,
  );

  const dry = await client.POST("/validate/general-ledger-codes/v1", { body });
  check(
    dry.response.status === 200 && dry.data?.message === "1 record(s) valid, none queued",
    `the dry run answers 200: ${dry.response.status}`,
  );

  const receipt = await client.GET("/requests/{request_id}", {
    params: { path: { request_id: requestId } },
  });
  const states = receipt.data?.records.map((r) => r.state) ?? [];
  check(
    receipt.response.status === 200 && states.length === 1,
    `the receipt lists the record: ${JSON.stringify(receipt.data)}`,
  );
}

const [baseUrl, key] = process.argv.slice(2);
main(baseUrl, key).catch((e: unknown) => {
  console.log(`FAILED: ${String(e)}`);
  process.exit(1);
});
