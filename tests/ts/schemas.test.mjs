// mcp-bridge's tool schemas as strict clients see them: every input and output schema
// compiles with ajv in strict mode (as the TypeScript SDK compiles outputSchema, but
// stricter), every input property has a type, and the daemon's limits are stated; an
// any-JSON output field has no type (clients check every result against it).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import Ajv from 'ajv';
import addFormats from 'ajv-formats';

import { Daemon, connect } from './harness.mjs';

let daemon;
let client;
before(async () => {
  daemon = await Daemon.start();
  client = await connect(daemon.socket, '--tools', 'all');
});
after(async () => {
  await client?.close();
  await daemon?.remove();
});

function strictAjv() {
  const ajv = new Ajv({ strict: true, allErrors: true });
  addFormats(ajv);
  return ajv;
}

/** Every schema a property may hold states its type, directly or in each anyOf branch. */
function typed(schema) {
  if (typeof schema.type === 'string') return true;
  return Array.isArray(schema.anyOf) && schema.anyOf.length > 0 && schema.anyOf.every(typed);
}

function eachProperty(schema, path, visit) {
  for (const [name, property] of Object.entries(schema.properties ?? {})) {
    visit(`${path}.${name}`, property);
    eachProperty(property, `${path}.${name}`, visit);
    if (property.items) eachProperty(property.items, `${path}.${name}[]`, visit);
  }
}

test('every tool schema compiles with ajv in strict mode', () => {
  const tools = Object.values(client.baton.tools);
  assert.equal(tools.length, 26);
  for (const tool of tools) {
    assert.doesNotThrow(() => strictAjv().compile(tool.inputSchema), `${tool.name} inputSchema`);
    assert.ok(tool.outputSchema, `${tool.name} has an outputSchema`);
    assert.doesNotThrow(() => strictAjv().compile(tool.outputSchema), `${tool.name} outputSchema`);
  }
});

test('every input property has a type, value included (as any JSON)', () => {
  for (const tool of Object.values(client.baton.tools)) {
    eachProperty(tool.inputSchema, tool.name, (path, property) => {
      assert.ok(typed(property), `${path} has a type: ${JSON.stringify(property)}`);
    });
  }
  const value = client.baton.tools.baton_set.inputSchema.properties.value;
  const validate = strictAjv().compile(value);
  for (const any of [{ a: 1 }, [1], 'text', 1.5, 2, true, null]) assert.ok(validate(any), JSON.stringify(any));
});

test('input schemas state the daemon limits', () => {
  const props = (name) => client.baton.tools[name].inputSchema.properties;
  const range = (p) => [p.minimum, p.maximum];
  assert.deepEqual(range(props('baton_claim').ttl_secs), [1, 604800]);
  assert.deepEqual(range(props('baton_heartbeat').ttl_secs), [1, 604800]);
  assert.deepEqual(range(props('baton_task_next').ttl_secs), [1, 86400]);
  assert.deepEqual(range(props('baton_task_heartbeat').ttl_secs), [1, 86400]);
  assert.equal(props('baton_claim').wait_ms.maximum, 3_600_000);
  assert.equal(props('baton_wait').timeout_ms.maximum, 3_600_000);
  assert.equal(props('baton_task_next').wait_ms.maximum, 3_600_000);
  for (const tool of ['baton_list', 'baton_history', 'baton_events']) {
    assert.deepEqual(range(props(tool).limit), [1, 1000], tool);
  }
  assert.equal(props('baton_task_register').nodes.maxItems, 100000);
  assert.deepEqual(range(props('baton_task_register').nodes.items.properties.max_attempts), [1, 100]);
  assert.deepEqual(props('baton_release').outcome.enum, ['released', 'modified', 'created', 'deleted', 'moved', 'abandoned']);
  for (const tool of Object.values(client.baton.tools)) {
    assert.equal(tool.inputSchema.additionalProperties, false, tool.name);
  }
});

test('any-JSON output fields carry no type and admit every JSON value, with this SDK\'s validator too', async () => {
  const { AjvJsonSchemaValidator } = await import('@modelcontextprotocol/sdk/validation/ajv');
  // The subschemas (the schema itself included) that list a branch per JSON type.
  const branched = (schema) => {
    if (schema === null || typeof schema !== 'object') return [];
    const own = Array.isArray(schema.anyOf) && schema.anyOf.length === 6 ? [schema] : [];
    return own.concat(Object.values(schema).flatMap(branched));
  };
  for (const tool of Object.values(client.baton.tools)) {
    assert.deepEqual(branched(tool.outputSchema), [], `${tool.name} outputSchema`);
  }
  const schema = client.baton.tools.baton_get.outputSchema;
  assert.deepEqual(Object.keys(schema.properties.value), ['description']);
  const checks = [strictAjv().compile(schema), (v) => new AjvJsonSchemaValidator().getValidator(schema)(v).valid];
  for (const value of [{ a: [1, null] }, [1, 'x'], 'text', 1.5, -2, true, null]) {
    const record = { found: true, namespace: 'n', key: 'k', version: 1, value, updated_by: null };
    for (const check of checks) assert.ok(check(record), JSON.stringify(value));
  }
});
