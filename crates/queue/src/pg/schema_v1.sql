CREATE SEQUENCE ap_intake.item_version;
CREATE TABLE ap_intake.item (
  key bytea PRIMARY KEY,
  interface text NOT NULL,
  state smallint NOT NULL,
  version bigint NOT NULL,
  queued_at bigint NOT NULL,
  seq bigint NOT NULL,
  updated_at bigint NOT NULL,
  attempts integer NOT NULL DEFAULT 0,
  last_error text,
  xml text NOT NULL,
  state_at bigint,
  lease_node text,
  lease_until timestamptz
);
CREATE INDEX item_line ON ap_intake.item (interface, state, queued_at, seq);
CREATE INDEX item_lease ON ap_intake.item (lease_node) WHERE lease_node IS NOT NULL;
CREATE TABLE ap_intake.delivered (interface text PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE ap_intake.backoff (
  interface text PRIMARY KEY,
  failures integer NOT NULL,
  next_attempt_ms bigint NOT NULL,
  last_error text,
  last_error_ms bigint,
  paused boolean NOT NULL DEFAULT false,
  last_success_ms bigint
);
CREATE TABLE ap_intake.node (
  name text PRIMARY KEY,
  started_at timestamptz NOT NULL,
  last_seen timestamptz NOT NULL
);
CREATE TABLE ap_intake.probe (node text PRIMARY KEY, at bigint NOT NULL);
CREATE TABLE ap_intake.receipt (
  rid bigserial PRIMARY KEY,
  request_id text NOT NULL,
  api_key text NOT NULL,
  nonce bigint NOT NULL,
  interface text NOT NULL,
  received_at bigint NOT NULL,
  UNIQUE (request_id, api_key)
);
CREATE INDEX receipt_age ON ap_intake.receipt (received_at);
CREATE TABLE ap_intake.receipt_line (
  rid bigint NOT NULL,
  idx integer NOT NULL,
  key bytea NOT NULL,
  version bigint NOT NULL,
  PRIMARY KEY (rid, idx)
);
CREATE TABLE ap_intake.settled (
  key bytea NOT NULL,
  version bigint NOT NULL,
  state smallint NOT NULL,
  at bigint NOT NULL,
  reason text,
  PRIMARY KEY (key, version)
);
CREATE INDEX settled_age ON ap_intake.settled (at);
