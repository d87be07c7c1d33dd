-- D41: a node is a running process, not a name. Leases, the node table and the readiness
-- probe are keyed by the instance id each start of a store draws; the configured name is a
-- label (two processes may share it). Leases taken under schema 1 (by name) stay until their
-- lease_until lapses, so a document still in flight is not sent again at once. A node of the
-- earlier version still running on this schema keeps taking requests, but its lease and
-- heartbeat statements fail (they name lease_node and the old node table): it delivers
-- nothing until it is upgraded, and never alongside a namesake. The old node rows describe
-- such processes: they go, and every node of this version adds its own row when it starts.
ALTER TABLE ap_intake.item RENAME COLUMN lease_node TO lease_instance;
DROP TABLE ap_intake.node;
CREATE TABLE ap_intake.node (
  instance text PRIMARY KEY,
  name text NOT NULL,
  started_at timestamptz NOT NULL,
  last_seen timestamptz NOT NULL,
  lease_secs double precision NOT NULL
);
DELETE FROM ap_intake.probe;
