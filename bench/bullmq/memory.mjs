// BullMQ's memory per job on a Redis of its own, beside `a2bench --memory`:
// used_memory (MEMORY STATS total.allocated less client buffers and script
// caches) per job enqueued, then per job completed with BullMQ's default
// (a completed job is kept: removeOnComplete false) and with
// removeOnComplete true. Usage (a server nobody else uses; it is flushed):
//
//	cd bench/bullmq && npm install && node memory.mjs redis://127.0.0.1:6379 [jobs]
import { Queue, Worker, QueueEvents } from 'bullmq';
import IORedis from 'ioredis';

const url = process.argv[2] ?? 'redis://127.0.0.1:6379';
const jobs = Number(process.argv[3] ?? 1000);
const payload = { user: 'u-1842', action: 'checkout', items: [1, 2, 3], total: 129.5 };
const admin = new IORedis(url, { maxRetriesPerRequest: null });

async function used() {
  await new Promise((r) => setTimeout(r, 300));
  const stats = await admin.call('MEMORY', 'STATS');
  const m = {};
  for (let i = 0; i < stats.length; i += 2) m[stats[i]] = stats[i + 1];
  let total = Number(m['total.allocated']);
  for (const noise of ['clients.normal', 'clients.slaves', 'replication.backlog', 'aof.buffer', 'lua.caches', 'functions.caches']) {
    total -= Number(m[noise] ?? 0);
  }
  return { bytes: total, keys: Number(await admin.dbsize()) };
}

async function run(removeOnComplete) {
  await admin.flushall('SYNC');
  const connection = new IORedis(url, { maxRetriesPerRequest: null });
  const name = 'orders';
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  const base = await used();
  const rows = [];
  const row = (state, r) => rows.push({ system: `BullMQ, removeOnComplete ${removeOnComplete}`, state,
    bytes: (r.bytes - base.bytes) / jobs, keys: (r.keys - base.keys) / jobs });
  for (let i = 0; i < jobs; i += 100) {
    await queue.addBulk(Array.from({ length: Math.min(100, jobs - i) }, () => ({ name: 'order.placed', data: payload, opts: { removeOnComplete } })));
  }
  row('enqueued', await used());
  let done = 0;
  const finished = new Promise((resolve) => {
    const worker = new Worker(name, async () => {}, { connection: new IORedis(url, { maxRetriesPerRequest: null }), concurrency: 16 });
    worker.on('completed', async () => {
      if (++done === jobs) { await worker.close(); resolve(); }
    });
  });
  await finished;
  // Let the last completions land.
  for (;;) {
    const counts = await queue.getJobCounts('wait', 'active');
    if (counts.wait === 0 && counts.active === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  row('processed', await used());
  await queue.close();
  await connection.quit();
  return rows;
}

const rows = [...(await run(false)), ...(await run(true))];
console.log('| system | state | B per job | keys per job |\n|---|---|--:|--:|');
for (const r of rows) console.log(`| ${r.system} | ${r.state} | ${r.bytes.toFixed(0)} | ${r.keys.toFixed(2)} |`);
await admin.quit();
