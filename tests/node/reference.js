// Drives the reference Node.js client (built from source) for tests/test_interop_node.py.
//
// Usage: node reference.js <build dir> <command> <JSON arguments, or @file holding them>
// The build dir holds the client's compiled dist/ and its node_modules/. Item data travels as
// hex, so the tests compare bytes exactly. Each command prints JSON lines on stdout; the long
// running ones (worker, paused-lease, blocked-lease) run until they are told to stop on stdin or
// are killed. Every wait has a deadline.
'use strict';

const path = require('path');
const readline = require('readline');
const {createRequire} = require('module');

const [buildDir, command, rawArgs] = process.argv.slice(2);
const fs = require('fs');
const args = JSON.parse(
  rawArgs && rawArgs.startsWith('@') ? fs.readFileSync(rawArgs.slice(1), 'utf8') : rawArgs || '{}',
);
const fromBuild = createRequire(path.join(buildDir, 'package.json'));
const Redis = fromBuild('ioredis');
const {WorkQueue, KeyPrefix, Item} = fromBuild('./dist/WorkQueue.js');

function say(value) {
  process.stdout.write(JSON.stringify(value) + '\n');
}

function shown(item) {
  return item === null ? null : {id: item.id, data: Buffer.from(item.data).toString('hex')};
}

// Lines read from stdin, handed out one per call; null once stdin is closed.
const lines = [];
const waiting = [];
let closed = false;
const input = readline.createInterface({input: process.stdin});
input.on('line', line => (waiting.length ? waiting.shift()(line) : lines.push(line)));
input.on('close', () => {
  closed = true;
  while (waiting.length) waiting.shift()(null);
});
function nextLine() {
  if (lines.length) return Promise.resolve(lines.shift());
  if (closed) return Promise.resolve(null);
  return new Promise(resolve => waiting.push(resolve));
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function main() {
  const db = new Redis(args.url, {connectionName: args.name || 'reference-node', maxRetriesPerRequest: 2});
  const queue = new WorkQueue(new KeyPrefix(args.prefix));
  try {
    switch (command) {
      case 'add':
        for (const {id, data} of args.items) {
          const item = new Item(Buffer.from(data, 'hex'), id);
          if (args.unique) {
            await queue.addUniqueItem(db, item);
            say(true);
          } else {
            say(await queue.addItem(db, item));
          }
        }
        break;
      case 'lease': {
        const item = await queue.lease(db, args.lease_secs, args.block, args.timeout);
        say(shown(item));
        break;
      }
      case 'complete':
        say(await queue.complete(db, new Item(Buffer.alloc(0), args.id)));
        break;
      case 'light-clean':
        await queue.lightClean(db);
        say('cleaned');
        break;
      case 'deep-clean':
        await queue.deepClean(db);
        say('cleaned');
        break;
      case 'counts':
        say({queued: await queue.queueLen(db), processing: await queue.processing(db)});
        break;
      case 'worker': {
        // Lease, work for work_ms, complete; report each item; until stdin says stop.
        let stop = false;
        nextLine().then(() => (stop = true));
        say('ready');
        while (!stop) {
          const item = await queue.lease(db, args.lease_secs, true, args.timeout);
          if (item === null) continue;
          say({leased: item.id});
          if (args.work_ms) await sleep(args.work_ms);
          const won = await queue.complete(db, item);
          say({done: item.id, data: Buffer.from(item.data).toString('hex'), won});
        }
        break;
      }
      case 'paused-lease': {
        // Lease, stopping after the id is moved onto the processing list (and its data read)
        // and before the lease key is set, until stdin says go.
        const getBuffer = db.getBuffer.bind(db);
        db.getBuffer = async key => {
          const data = await getBuffer(key);
          say({moved: key.slice(queue['itemDataKey'].prefix.length)});
          await nextLine();
          return data;
        };
        const item = await queue.lease(db, args.lease_secs, false, 0);
        say({leased: shown(item)});
        await nextLine();
        break;
      }
      case 'blocked-lease': {
        // One blocking lease (timeout in s; 0 waits for ever), reported when it returns.
        say('blocking');
        const item = await queue.lease(db, args.lease_secs, true, args.timeout);
        say({leased: shown(item)});
        await nextLine();
        break;
      }
      default:
        throw new Error(`unknown command ${command}`);
    }
  } finally {
    db.disconnect();
    input.close();
  }
}

main().catch(err => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n');
  process.exit(1);
});
