// A harness session on a natsstore, with npm's nats client: the harness's
// Go code (github.com/looprig/natsstore: natsstore.go, seam.go, lease.go,
// subject.go; nats.go v1.53.1's jetstream package beneath it) followed
// statement by statement, each operation citing the file and line it
// follows.  leasefs's code is not read here.
//
//   node peer.mjs URI NAME MODE [TTL_S]
//     try        one Acquire: "granted E" (then Release) or "busy E"
//     hold       "granted E" or "busy E" (exit 1); the heartbeat renews
//                until stdin closes or says "release" (then Release), or
//                prints "lost" (exit 2) when the lease is lost
//     wait       Acquire every 50 ms until granted, then as hold
//     provision  Open only (the buckets), then "provisioned"
//   TTL_S: the leaser's TTL (lease.go:119's ttl; Open wires
//   defaultLeaseTTL, 30 s, at natsstore.go:316); tests pass a shorter one.
//   An Acquire that fails otherwise prints "error ..." and exits 3.
//   With WRITE_PROBE set, right after the grant: try to create that file,
//   "probe: OK" / "probe: ERRNO".  With RECORDS set, while the lease lives
//   (Lost() not closed: the session's watcher closes admission on it), it
//   appends "EPOCH SEQ TAG MS" lines (TAG from RECORDS_TAG, MS its wall
//   clock) to RECORDS, each
//   fsync'ed, and each acknowledged one to RECORDS_ACK.
import { connect, headers } from "nats";
import { randomBytes } from "node:crypto";
import { closeSync, fsyncSync, openSync, writeFileSync, writeSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";

const [uri, name, mode, ttlArg] = process.argv.slice(2);
const out = (s) => process.stdout.write(s + "\n");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// lease.go:22: defaultLeaseTTL; newLeaserStore (lease.go:119-127) keeps
// a positive ttl.
const ttlMs = ttlArg ? Number(ttlArg) * 1000 : 30_000;

// ---- Open: natsstore.go:229-243 -> openRemote (natsstore.go:271-287) ----
// nats.Connect(url, Name("natsstore"), Timeout(10 s), DrainTimeout(30 s))
// (natsstore.go:272-276); nats.go's defaults otherwise: 60 reconnects
// 2 s apart (nats.go:55-56).
const nc = await connect({
  servers: uri.replace(/^nats:\/\//, "").replace(/\?.*$/, "").split(","),
  name: "natsstore",
  timeout: 10_000,
  maxReconnectAttempts: 60,
  reconnectTimeWait: 2_000,
});
// buildComposite: jetstream.New(conn) (natsstore.go:307); its API
// requests wait 5 s (jetstream/jetstream.go:457, defaultAPITimeout).
const API_MS = 5_000;
const js = nc.jetstream({ timeout: API_MS });

// provisionBuckets (natsstore.go:334-348): CreateOrUpdateKeyValue with
// leaseBucketConfig(leaseBucketName, defaultLeaseTTL) (natsstore.go:335).
// The application KV and blob buckets it provisions next (natsstore.go:
// 339-346) hold no lease and are left out.
const BUCKET = "natsstore_leases"; // natsstore.go:43
const HOUR_NS = 3_600_000_000_000;
// backstopBucketTTL(30 s) = max(100 * 30 s, 1 h) = 1 h (lease.go:428-434);
// leaseBucketConfig: TTL that, FileStorage, History 1, Replicas 1
// (seam.go:254-262); prepareKeyValueConfig (nats.go jetstream/kv.go:
// 614-730) makes it this StreamConfig, marshalled in field order
// (jetstream/stream_config.go:58-216, omitempty fields left out).
const streamConfig = {
  name: "KV_" + BUCKET,                       // kv.go:673
  subjects: ["$KV." + BUCKET + ".>"],         // kv.go:727
  retention: "limits",                        // stream_config.go:76, zero value
  max_consumers: -1,                          // kv.go:686
  max_msgs: -1,                               // kv.go:685
  max_bytes: -1,                              // kv.go:638-641, 676
  discard: "new",                             // kv.go:690
  max_age: HOUR_NS,                           // kv.go:677 (cfg.TTL)
  max_msgs_per_subject: 1,                    // kv.go:623-629, 675 (History)
  max_msg_size: -1,                           // kv.go:642-645, 678
  storage: "file",                            // kv.go:679
  num_replicas: 1,                            // kv.go:631-634, 680
  duplicate_window: 120_000_000_000,          // kv.go:651-654, 684: 2 min
  deny_delete: true,                          // kv.go:683
  allow_rollup_hdrs: true,                    // kv.go:682
  compression: "none",                        // kv.go:655-658, 689
  allow_direct: true,                         // kv.go:687
  mirror_direct: false,                       // stream_config.go:182
  consumer_limits: {},                        // stream_config.go:186
};

async function api(subject, body) {
  const m = await nc.request(subject, body === undefined ? "" : JSON.stringify(body),
    { timeout: API_MS });
  return m.json();
}

async function createOrUpdateKeyValue() {
  // prepareKeyValueConfig: AccountInfo first (kv.go:618).
  const acct = await api("$JS.API.INFO");
  if (acct.error) throw new Error("account info: " + JSON.stringify(acct.error));
  // CreateOrUpdateStream (jetstream/jetstream.go:795-806): UpdateStream,
  // and CreateStream when it is not found (10059, jetstream.go:753-755).
  let si = await api("$JS.API.STREAM.UPDATE." + streamConfig.name, streamConfig);
  if (si.error && si.error.err_code === 10059)
    si = await api("$JS.API.STREAM.CREATE." + streamConfig.name, streamConfig);
  if (si.error) throw new Error("provision: " + JSON.stringify(si.error));
  // mapStreamToKVS: direct gets when the stream allows them (kv.go,
  // useDirect from the stream's AllowDirect).
  return js.views.kv(BUCKET, { bindOnly: true, allow_direct: si.config.allow_direct });
}

let kv;
try {
  kv = await createOrUpdateKeyValue();
} catch (e) {
  out("error " + e.message);
  process.exit(3);
}
if (mode === "provision") {
  out("provisioned");
  await nc.close();
  process.exit(0);
}

// ---- the seam: seam.go:144-184 over nats.go's kv (jetstream/kv.go) ----
class KeyExists extends Error {}
class KeyNotFound extends Error {}
class CasConflict extends Error {}
const wrongLastSeq = (e) => e?.api_error?.err_code === 10071 || e?.api_error?.err_code === 10164;

// seam.go:144-153: kv.Create (kv.go:1062-1093): an update at revision 0,
// over a delete marker at its revision; wrong-last-sequence -> KeyExists.
async function seamCreate(key, val) {
  try {
    return await kv.create(key, val);
  } catch (e) {
    if (wrongLastSeq(e)) throw new KeyExists();
    throw e;
  }
}
// seam.go:157-166: kv.Get (kv.go:1007-1017): the last message of the key's
// subject; none, or a DEL/PURGE marker, is ErrKeyNotFound.
async function seamGet(key) {
  const e = await kv.get(key);
  if (!e || e.operation !== "PUT") throw new KeyNotFound();
  return { val: e.value, rev: e.revision };
}
// seam.go:172-184: kv.Update (kv.go:1117-1150): published with
// Nats-Expected-Last-Subject-Sequence; wrong-last-sequence -> conflict.
async function seamUpdate(key, val, rev) {
  try {
    return await kv.update(key, val, rev);
  } catch (e) {
    if (wrongLastSeq(e)) throw new CasConflict();
    throw e;
  }
}

// ---- the leaser: lease.go ----
// leaseKeyForName -> streamForName -> encodeStream (lease.go:408-410,
// subject.go:78-83, 104-121): '_' -> "_u", '.' -> "_d", '/' -> "_s".
const key = name.replace(/_/g, "_u").replace(/\./g, "_d").replace(/\//g, "_s");

// encodeLeaseRecord (lease.go:448-454): json.Marshal of leaseRecord
// (lease.go:96-100); a time.Time as RFC 3339 (Go writes nanoseconds, this
// client has milliseconds).
const encode = (rec) => new TextEncoder().encode(JSON.stringify({
  epoch: rec.epoch, holder: rec.holder, expires_at: new Date(rec.expiresAt).toISOString(),
}));
// decodeLeaseRecord (lease.go:459-470): unknown fields and trailing data
// refused; missing fields are zero.
function decode(bytes) {
  const o = JSON.parse(new TextDecoder().decode(bytes));
  for (const k of Object.keys(o))
    if (!["epoch", "holder", "expires_at"].includes(k)) throw new Error("unknown field " + k);
  const t = o.expires_at === undefined ? 0 : Date.parse(o.expires_at);
  if (Number.isNaN(t)) throw new Error("bad expires_at");
  return { epoch: o.epoch ?? 0, holder: o.holder ?? "", expiresAt: t };
}

// The leaser's clock (lease.go:87, time.Now): a wall time for what is
// written and read, with Go's monotonic reading beside it for validUntil
// (lease.go:210-214, 377, 397 compare two times that both carry one).
const now = () => ({ wall: Date.now(), mono: performance.now() });

// Acquire (lease.go:142-168).
async function acquire() {
  const holder = randomBytes(16).toString("hex");          // lease.go:147, 414-420
  let got;
  try {
    got = await seamGet(key);                               // lease.go:152
  } catch (e) {
    if (e instanceof KeyNotFound) return createLease(holder, 1); // lease.go:154-155
    throw new Error("get: " + e.message);                   // lease.go:156-157
  }
  const rec = decode(got.val);                              // lease.go:160-163
  if (!expired(rec)) return { busy: rec.epoch };            // lease.go:164-166
  return updateLease(holder, rec.epoch + 1, got.rev);       // lease.go:167
}
// encode (lease.go:210-214): ExpiresAt = now + ttl.
function stamp(epoch, holder) {
  const t = now();
  return { rec: { epoch, holder, expiresAt: t.wall + ttlMs }, validMono: t.mono + ttlMs };
}
// expired (lease.go:218-220): ExpiresAt at or before now (wall).
const expired = (rec) => !(rec.expiresAt > Date.now());
// createLease (lease.go:173-186).
async function createLease(holder, epoch) {
  const { rec, validMono } = stamp(epoch, holder);
  try {
    const rev = await seamCreate(key, encode(rec));
    return start(rec, rev, validMono);
  } catch (e) {
    if (e instanceof KeyExists) return { busy: epoch };      // lease.go:180-181
    throw new Error("create: " + e.message);
  }
}
// updateLease (lease.go:192-205).
async function updateLease(holder, epoch, lastRev) {
  const { rec, validMono } = stamp(epoch, holder);
  try {
    const rev = await seamUpdate(key, encode(rec), lastRev);
    return start(rec, rev, validMono);
  } catch (e) {
    if (e instanceof CasConflict || e instanceof KeyNotFound) return { busy: epoch - 1 }; // lease.go:199-200
    throw new Error("update: " + e.message);
  }
}
// start (lease.go:225-241): the lease and its heartbeat.
function start(rec, rev, validMono) {
  const l = { rec, rev, validMono, lost: false, stopped: false, onLost: [] };
  l.heartbeat = heartbeat(l);
  return l;
}
function markLost(l) {                                       // lease.go:323-325
  if (l.lost) return;
  l.lost = true;
  for (const f of l.onLost) f();
}
// startHeartbeat (lease.go:331-353): a Ticker every ttl/3; a Ticker keeps
// one tick when the receiver is late and drops the rest.
async function heartbeat(l) {
  const interval = ttlMs / 3, t0 = performance.now();
  let k = 1;
  while (!l.stopped) {
    const wait = t0 + k * interval - performance.now();
    if (wait > 0) await Promise.race([sleep(wait), new Promise((r) => l.onStop = r)]);
    if (l.stopped) return;
    if (!(await renew(l))) {
      markLost(l);
      return;
    }
    k = Math.max(k + 1, Math.floor((performance.now() - t0) / interval));
  }
}
// renew (lease.go:372-401).
async function renew(l) {
  const t = now();
  const rec = { ...l.rec, expiresAt: t.wall + ttlMs };        // lease.go:377-378
  try {
    l.rev = await seamUpdate(key, encode(rec), l.rev);       // lease.go:382
    l.rec = rec;
    l.validMono = t.mono + ttlMs;                            // lease.go:386
    return true;
  } catch (e) {
    if (e instanceof CasConflict || e instanceof KeyNotFound) return false; // lease.go:390-391
    return performance.now() < l.validMono;                  // lease.go:394-400
  }
}
// Release (lease.go:292-320): stop the heartbeat, Lost, then the entry
// expired now with the epoch kept; a conflict is not an error.
async function release(l) {
  l.stopped = true;
  if (l.onStop) l.onStop();
  await l.heartbeat;
  markLost(l);
  try {
    await seamUpdate(key, encode({ ...l.rec, expiresAt: Date.now() }), l.rev);
  } catch { /* lease.go:314-316 */ }
}

// ---- the driver (a session, not the store) ----
function records(l) {
  const fd = openSync(process.env.RECORDS, "a");
  const ack = openSync(process.env.RECORDS_ACK, "a");
  const tag = process.env.RECORDS_TAG || "peer";
  let seq = 0;
  const done = (async () => {
    while (!l.lost) {
      const line = `${l.rec.epoch} ${++seq} ${tag} ${Date.now()}\n`;
      writeSync(fd, line);
      fsyncSync(fd);
      writeSync(ack, line);
      await sleep(5);
    }
    closeSync(fd);
    closeSync(ack);
  })();
  return done;
}

let g;
try {
  g = await acquire();
  while (g.busy !== undefined && mode === "wait") {
    await sleep(50);
    g = await acquire();
  }
} catch (e) {
  out("error " + e.message);
  process.exit(3);
}
if (g.busy !== undefined) {
  out("busy " + g.busy);
  await nc.close();
  process.exit(mode === "hold" ? 1 : 0);
}
out("granted " + g.rec.epoch);
if (mode === "try") {
  await release(g);
  await nc.close();
  process.exit(0);
}
if (process.env.WRITE_PROBE) {
  try {
    writeFileSync(process.env.WRITE_PROBE, "peer\n");
    out("probe: OK");
  } catch (e) {
    out("probe: " + e.code);
  }
}
const writing = process.env.RECORDS ? records(g) : null;
const lines = createInterface({ input: process.stdin });
const asked = new Promise((r) => {
  lines.on("line", (s) => { if (s.trim() === "release") r(); });
  lines.on("close", r);
});
const lost = new Promise((r) => g.onLost.push(r));
await Promise.race([asked, lost]);
if (g.lost) {
  await writing;
  out("lost");
  await nc.close();
  process.exit(2);
}
await release(g);
await writing;
await nc.close();
