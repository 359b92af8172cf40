// kafkajs side of the record-fidelity matrix (tests/kafka_fidelity.rs).
//
//   node fidelity_kafkajs.js BOOTSTRAP TOPIC GROUP NATIVE_TOPIC
//
// Produces N=100 records to partition 0 of TOPIC in one send (one batch), record i being:
//   key      "k<i % 7>"                 (repeated keys)
//   value    null if i % 5 == 0 (a tombstone), "" if i % 5 == 1, else "v<i>"
//   headers  none if i % 4 == 3, else { a: ['1', '2', '<i>'], b: 'x', e: '' }: on the wire
//            a=1, a=2, a=<i>, b=x, e= (kafkajs takes headers as an object, so a name's values
//            are sent together; it cannot send a null header value: it measures the value
//            with Buffer.byteLength first, which throws on null)
// then reads them back three ways, printing one JSON object per record read with its "phase":
//   group1  a member of GROUP from the beginning: the first 37 records, then commits offset 37
//           (inside the produced batch) and leaves
//   group2  a new member of GROUP: resumes at the committed 37, reads the remaining 63
//   seek    a member of GROUP-seek that seeks to 50 (inside the batch) before its first
//           fetch: reads 50
//   native  a member of GROUP-native reading NATIVE_TOPIC from the beginning: 20 records the
//           test produced with rill's own client, null header values among them
// Each object: phase, partition, offset, key, value, headers ([[name, value], ...]: kafkajs
// hands headers back as an object, a repeated name as an array; flattened in that order).
// The first line is {"client": "kafkajs", "version": ...}. Exits non-zero on any error, or if
// a phase gets fewer records than it wants within 60 s.
'use strict'

const { Kafka, logLevel, Partitioners } = require('kafkajs')
const { version } = require('kafkajs/package.json')

const N = 100
const COMMIT_AT = 37
const SEEK_TO = 50

function record(i) {
  const value = i % 5 === 0 ? null : i % 5 === 1 ? Buffer.alloc(0) : Buffer.from(`v${i}`)
  const headers = i % 4 === 3 ? {} : { a: ['1', '2', String(i)], b: 'x', e: '' }
  return { key: Buffer.from(`k${i % 7}`), value, headers, partition: 0 }
}

const text = b => (b === null || b === undefined ? null : b.toString())

function show(phase, partition, m) {
  const headers = []
  for (const [k, v] of Object.entries(m.headers || {})) {
    for (const x of Array.isArray(v) ? v : [v]) headers.push([k, text(x)])
  }
  process.stdout.write(
    JSON.stringify({
      phase,
      partition,
      offset: Number(m.offset),
      key: text(m.key),
      value: text(m.value),
      headers,
    }) + '\n'
  )
}

// Logs go to stderr: stdout carries only the JSON lines.
const logCreator = () => ({ namespace, log }) =>
  process.stderr.write(`${namespace}: ${log.message} ${JSON.stringify(log)}\n`)

// Reads `want` records as a member of `groupId` (seeking first when `seekTo` is given) and
// returns once they are printed, the consumer still connected.
async function read(kafka, topic, groupId, phase, want, seekTo) {
  const consumer = kafka.consumer({ groupId })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  let got = 0
  let timer
  const done = new Promise((resolve, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${phase}: only ${got} of ${want} records within 60 s`)),
      60000
    )
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        // Records past `want` (the rest of a fetched batch) are not this phase's.
        if (got >= want) return
        show(phase, partition, message)
        got += 1
        if (got === want) {
          consumer.pause([{ topic }])
          resolve()
        }
      },
    })
  })
  // Applied before the first fetch (kafkajs seeks pending offsets when it fetches).
  if (seekTo !== undefined) consumer.seek({ topic, partition: 0, offset: String(seekTo) })
  try {
    await done
  } finally {
    clearTimeout(timer)
  }
  return consumer
}

async function main([bootstrap, topic, group, nativeTopic]) {
  process.stdout.write(JSON.stringify({ client: 'kafkajs', version }) + '\n')
  const kafka = new Kafka({
    clientId: 'rill-fidelity',
    brokers: [bootstrap],
    logLevel: logLevel.ERROR,
    logCreator,
  })
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  const messages = []
  for (let i = 0; i < N; i++) messages.push(record(i))
  await producer.send({ topic, acks: -1, messages })
  await producer.disconnect()

  const first = await read(kafka, topic, group, 'group1', COMMIT_AT)
  await first.commitOffsets([{ topic, partition: 0, offset: String(COMMIT_AT) }])
  await first.disconnect()

  const second = await read(kafka, topic, group, 'group2', N - COMMIT_AT)
  await second.disconnect()

  const seeker = await read(kafka, topic, `${group}-seek`, 'seek', N - SEEK_TO, SEEK_TO)
  await seeker.disconnect()

  const native = await read(kafka, nativeTopic, `${group}-native`, 'native', 20)
  await native.disconnect()
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  e => {
    process.stderr.write(`${e.stack || e}\n`)
    process.exit(1)
  }
)
