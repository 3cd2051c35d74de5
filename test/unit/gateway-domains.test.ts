import assert from 'node:assert/strict'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { ConfigFileError } from '../../src/server/config-issues.js'
import {
  applyReplaces,
  type DomainConfigSet,
  type DomainDefaults,
  type DomainEntry,
  type DomainMatch,
  type DomainParseOptions,
  loadDomains,
  parseDomainFiles,
  UNIT_SECONDS,
} from '../../src/server/gateway/domains.js'

// The envoyproxy/ratelimit domain config: the README's examples 1–11, its error cases and
// GetLimit's matching (src/config/config_impl.go), with YAML written for these tests.

const DEFAULTS: DomainDefaults = { algorithm: 'fixed-window-algo', syncRate: undefined }

function yaml(...lines: string[]): string {
  return `${lines.join('\n')}\n`
}

function parse(text: string, file = 'rl.yaml', defaults = DEFAULTS): DomainConfigSet {
  return parseDomainFiles([{ file, text }], defaults)
}

/** `entries('k', 'v', 'k2', 'v2')`: a descriptor's entries. */
function entries(...kv: string[]): DomainEntry[] {
  const out: DomainEntry[] = []
  for (let i = 0; i < kv.length; i += 2) out.push({ key: kv[i] as string, value: kv[i + 1] as string })
  return out
}

function must(m: DomainMatch | undefined): DomainMatch {
  assert.ok(m !== undefined, 'expected a rule to match')
  return m
}

/** The limit a match gives, in a form that is easy to compare. */
function limitOf(m: DomainMatch | undefined): string | undefined {
  if (m === undefined) return undefined
  const r = m.rule
  const flags = [r.name && `name=${r.name}`, r.shadowMode && 'shadow', r.unlimited && 'unlimited'].filter(Boolean)
  const limit = r.unlimited ? 'unlimited' : `${r.requestsPerUnit}/${r.unit}`
  return flags.length === 0 || (flags.length === 1 && r.unlimited) ? limit : `${limit} ${flags.filter((f) => f !== 'unlimited').join(' ')}`
}

/** The problems a config is refused with, one line each. */
function problems(files: { file: string; text: string }[] | string, options: DomainParseOptions = {}): string[] {
  const list = typeof files === 'string' ? [{ file: 'bad.yaml', text: files }] : files
  try {
    parseDomainFiles(list, DEFAULTS, options)
  } catch (err) {
    assert.ok(err instanceof ConfigFileError, `expected a ConfigFileError, got ${String(err)}`)
    return err.message.split('\n')
  }
  assert.fail('the config was accepted')
}

describe('domain config: the README examples', () => {
  it('example 1: two values of one key, each with its own limit and counter', () => {
    const set = parse(
      yaml(
        'domain: mongo_cps',
        'descriptors:',
        '  - key: database',
        '    value: users',
        '    rate_limit: { unit: second, requests_per_unit: 500 }',
        '  - key: database',
        '    value: default',
        '    rate_limit: { unit: second, requests_per_unit: 500 }',
      ),
    )
    const users = must(set.match('mongo_cps', entries('database', 'users')))
    const dflt = must(set.match('mongo_cps', entries('database', 'default')))
    assert.equal(limitOf(users), '500/second')
    assert.equal(limitOf(dflt), '500/second')
    assert.notEqual(users.counterKey, dflt.counterKey)
    assert.equal(users.rule.statsKey, 'mongo_cps.database_users')
    assert.equal(users.rule.windowSeconds, 1)
    assert.equal(set.match('mongo_cps', entries('database', 'other')), undefined)
    assert.equal(set.match('other_domain', entries('database', 'users')), undefined)
    assert.deepEqual([...set.domains()], ['mongo_cps'])
  })

  it('example 2: a nested per-number limit under a placeholder, and a top-level one', () => {
    const set = parse(
      yaml(
        'domain: messaging',
        'descriptors:',
        '  # 5 marketing messages a day per number',
        '  - key: message_type',
        '    value: marketing',
        '    descriptors:',
        '      - key: to_number',
        '        rate_limit:',
        '          unit: day',
        '          requests_per_unit: 5',
        '  # 100 messages a day per number',
        '  - key: to_number',
        '    rate_limit:',
        '      unit: day',
        '      requests_per_unit: 100',
      ),
    )
    // one request with two descriptors: each matches its own rule
    const marketing = must(set.match('messaging', entries('message_type', 'marketing', 'to_number', '2061111111')))
    const any = must(set.match('messaging', entries('to_number', '2061111111')))
    assert.equal(limitOf(marketing), '5/day')
    assert.equal(limitOf(any), '100/day')
    assert.equal(marketing.rule.windowSeconds, 86_400)
    // each number gets its own counter
    const other = must(set.match('messaging', entries('message_type', 'marketing', 'to_number', '2062222222')))
    assert.notEqual(marketing.counterKey, other.counterKey)
    assert.equal(marketing.rule, other.rule)
    assert.notEqual(marketing.counterKey, any.counterKey)
    // the placeholder has no limit of its own
    assert.equal(set.match('messaging', entries('message_type', 'marketing')), undefined)
    assert.equal(marketing.metricKey, 'messaging.message_type_marketing.to_number')
  })

  it('example 3: key and value beats key alone (a blocked address)', () => {
    const set = parse(
      yaml(
        'domain: edge_proxy_per_ip',
        'descriptors:',
        '  - key: remote_address',
        '    value: 50.0.0.5',
        '    rate_limit: { unit: second, requests_per_unit: 0 }',
        '  - key: remote_address',
        '    rate_limit: { unit: second, requests_per_unit: 10 }',
      ),
    )
    const a = must(set.match('edge_proxy_per_ip', entries('remote_address', '50.0.0.1')))
    const b = must(set.match('edge_proxy_per_ip', entries('remote_address', '50.0.0.2')))
    assert.equal(limitOf(a), '10/second')
    assert.notEqual(a.counterKey, b.counterKey)
    assert.equal(limitOf(set.match('edge_proxy_per_ip', entries('remote_address', '50.0.0.5'))), '0/second')
  })

  it('example 4: a request matches only a rule at its own depth', () => {
    const shallow = parse(
      yaml(
        'domain: example4',
        'descriptors:',
        '  - key: key',
        '    value: value',
        '    rate_limit: { requests_per_unit: 300, unit: second }',
      ),
    )
    assert.equal(shallow.match('example4', entries('key', 'value', 'subkey', 'subvalue')), undefined)
    assert.equal(limitOf(shallow.match('example4', entries('key', 'value'))), '300/second')
    const deep = parse(
      yaml(
        'domain: example4',
        'descriptors:',
        '  - key: key',
        '    value: value',
        '    descriptors:',
        '      - key: subkey',
        '        rate_limit: { requests_per_unit: 300, unit: second }',
      ),
    )
    assert.equal(limitOf(deep.match('example4', entries('key', 'value', 'subkey', 'subvalue'))), '300/second')
    assert.equal(deep.match('example4', entries('key', 'value')), undefined)
    assert.equal(deep.match('example4', entries('key', 'value', 'subkey', 'x', 'more', 'y')), undefined)
  })

  it('example 5: an unlimited descriptor has no unit, no count and no window', () => {
    const set = parse(
      yaml(
        'domain: internal',
        'descriptors:',
        '  - key: ldap',
        '    rate_limit:',
        '      unlimited: true',
        '  - key: azure',
        '    rate_limit: { unit: minute, requests_per_unit: 100 }',
      ),
    )
    const ldap = must(set.match('internal', entries('ldap', 'x')))
    assert.equal(ldap.rule.unlimited, true)
    assert.equal(ldap.rule.unit, undefined)
    assert.equal(ldap.rule.requestsPerUnit, 0)
    assert.equal(ldap.rule.windowSeconds, 0)
    assert.equal(limitOf(set.match('internal', entries('azure', 'x'))), '100/minute')
  })

  it('example 6: shadow_mode on one nested rule and not on its sibling', () => {
    const set = parse(
      yaml(
        'domain: example6',
        'descriptors:',
        '  - key: service',
        '    descriptors:',
        '      - key: user',
        '        value: user-a',
        '        shadow_mode: true',
        '        rate_limit: { requests_per_unit: 10, unit: second }',
        '      - key: user',
        '        value: user-b',
        '        rate_limit: { requests_per_unit: 20, unit: second }',
      ),
    )
    assert.equal(limitOf(set.match('example6', entries('service', 'auth-service', 'user', 'user-a'))), '10/second shadow')
    assert.equal(limitOf(set.match('example6', entries('service', 'auth-service', 'user', 'user-b'))), '20/second')
    assert.equal(set.match('example6', entries('service', 'auth-service', 'user', 'user-c')), undefined)
  })

  it('example 7: replaces drops the named rule when both match one request', () => {
    const set = parse(
      yaml(
        'domain: example7',
        'descriptors:',
        '  - key: key_1',
        '    value: value_1',
        '    descriptors:',
        '      - key: user',
        '        value: bkthomps',
        '        rate_limit:',
        '          name: specific_limit',
        '          requests_per_unit: 5',
        '          unit: second',
        '  - key: key_2',
        '    value: value_2',
        '    descriptors:',
        '      - key: user',
        '        value: bkthomps',
        '        rate_limit:',
        '          replaces:',
        '            - name: specific_limit',
        '          requests_per_unit: 10',
        '          unit: second',
      ),
    )
    const first = must(set.match('example7', entries('key_1', 'value_1', 'user', 'bkthomps')))
    const second = must(set.match('example7', entries('key_2', 'value_2', 'user', 'bkthomps')))
    assert.equal(limitOf(first), '5/second name=specific_limit')
    assert.deepEqual(second.rule.replaces, ['specific_limit'])
    // alone, each applies
    assert.deepEqual(applyReplaces([first]), [first])
    assert.deepEqual(applyReplaces([second]), [second])
    // together, only the replacing one does (in any order)
    assert.deepEqual(applyReplaces([first, second]), [undefined, second])
    assert.deepEqual(applyReplaces([second, undefined, first]), [second, undefined, undefined])
  })

  it('replaces: unlimited matches stay, and two rules that replace each other both drop', () => {
    const set = parse(
      yaml(
        'domain: r',
        'descriptors:',
        '  - { key: a, rate_limit: { name: A, unit: second, requests_per_unit: 1, replaces: [{ name: B }] } }',
        '  - { key: b, rate_limit: { name: B, unit: second, requests_per_unit: 1, replaces: [{ name: A }] } }',
        '  - { key: c, rate_limit: { name: C, unlimited: true } }',
        '  - { key: d, rate_limit: { unit: second, requests_per_unit: 1, replaces: [{ name: C }] } }',
      ),
    )
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((k) => must(set.match('r', entries(k, 'x'))))
    assert.deepEqual(applyReplaces([a, b]), [undefined, undefined])
    assert.deepEqual(applyReplaces([c, d]), [c, d])
  })

  it('example 8: detailed_metric puts the value in the metric key, not in the limit', () => {
    const set = parse(
      yaml(
        'domain: example8',
        'descriptors:',
        '  - key: key1',
        '    detailed_metric: true',
        '    rate_limit: { unit: minute, requests_per_unit: 10 }',
        '  - key: key1',
        '    value: value1',
        '    rate_limit: { unit: minute, requests_per_unit: 20 }',
      ),
    )
    const a = must(set.match('example8', entries('key1', 'unspecified_value')))
    const b = must(set.match('example8', entries('key1', 'unspecified_value2')))
    const c = must(set.match('example8', entries('key1', 'value1')))
    assert.deepEqual([limitOf(a), limitOf(b), limitOf(c)], ['10/minute', '10/minute', '20/minute'])
    assert.deepEqual(
      [a.metricKey, b.metricKey, c.metricKey],
      ['example8.key1_unspecified_value', 'example8.key1_unspecified_value2', 'example8.key1_value1'],
    )
    assert.equal(a.rule.statsKey, 'example8.key1')
  })

  it('example 9: trailing, middle and repeated wildcards', () => {
    const set = (value: string): DomainConfigSet =>
      parse(
        yaml(
          'domain: example9',
          'descriptors:',
          '  - key: k',
          `    value: ${JSON.stringify(value)}`,
          '    rate_limit: { unit: minute, requests_per_unit: 20 }',
        ),
      )
    const cases: Array<[string, string[], string[]]> = [
      ['value*', ['value1', 'value2', 'valueXYZ', 'value'], ['valu', 'xvalue1']],
      ['/api/*/action', ['/api/123/action', '/api/user-id/action', '/api//action'], ['/api/123/other', '/api/action']],
      ['/api/*/resource/*/action', ['/api/v1/resource/123/action', '/api/v2/resource/456/action'], ['/api/v1/action/resource/1']],
      // the fixed parts may not overlap
      ['ab*ba', ['abba', 'abxba'], ['aba']],
    ]
    for (const [pattern, hits, misses] of cases) {
      const s = set(pattern)
      for (const v of hits) assert.equal(limitOf(s.match('example9', entries('k', v))), '20/minute', `${pattern} matches ${v}`)
      for (const v of misses) assert.equal(s.match('example9', entries('k', v)), undefined, `${pattern} does not match ${v}`)
      // without share_threshold, every value counts apart, and the metric keeps the pattern
      const [one, two] = hits.map((v) => must(s.match('example9', entries('k', v))))
      assert.notEqual(one?.counterKey, two?.counterKey)
      assert.equal(one?.metricKey, `example9.k_${pattern}`)
    }
  })

  it('example 10: value_to_metric puts runtime values in the metric key', () => {
    const set = parse(
      yaml(
        'domain: example10',
        'descriptors:',
        '  - key: route',
        '    value_to_metric: true',
        '    descriptors:',
        '      - key: http_method',
        '        value_to_metric: true',
        '        descriptors:',
        '          - key: subject_id',
        '            rate_limit: { unit: minute, requests_per_unit: 60 }',
      ),
    )
    assert.equal(
      must(set.match('example10', entries('route', 'api', 'http_method', 'GET', 'subject_id', '123'))).metricKey,
      'example10.route_api.http_method_GET.subject_id',
    )
    assert.equal(
      must(set.match('example10', entries('route', 'web', 'http_method', 'POST', 'subject_id', '456'))).metricKey,
      'example10.route_web.http_method_POST.subject_id',
    )
    const plain = parse(
      yaml(
        'domain: example10',
        'descriptors:',
        '  - key: route',
        '    descriptors:',
        '      - key: http_method',
        '        descriptors:',
        '          - key: subject_id',
        '            rate_limit: { unit: minute, requests_per_unit: 60 }',
      ),
    )
    assert.equal(
      must(plain.match('example10', entries('route', 'api', 'http_method', 'GET', 'subject_id', '123'))).metricKey,
      'example10.route.http_method.subject_id',
    )
    const wild = parse(
      yaml(
        'domain: example10_wildcard',
        'descriptors:',
        '  - key: user',
        '    value_to_metric: true',
        '    descriptors:',
        '      - key: action',
        '        value: read*',
        '        value_to_metric: true',
        '        descriptors:',
        '          - key: resource',
        '            rate_limit: { unit: minute, requests_per_unit: 100 }',
      ),
    )
    const m = must(wild.match('example10_wildcard', entries('user', 'alice', 'action', 'readfile', 'resource', 'documents')))
    assert.equal(m.metricKey, 'example10_wildcard.user_alice.action_readfile.resource')
    assert.equal(limitOf(m), '100/minute')
  })

  it('example 11: share_threshold gives every value of a wildcard one counter', () => {
    const set = parse(
      yaml(
        'domain: example11',
        'descriptors:',
        '  - key: files',
        '    value: files/*',
        '    share_threshold: true',
        '    rate_limit: { unit: hour, requests_per_unit: 10 }',
        '  - key: files_no_share',
        '    value: files_no_share/*',
        '    share_threshold: false',
        '    rate_limit: { unit: hour, requests_per_unit: 10 }',
      ),
    )
    const shared = ['files/a.pdf', 'files/b.csv', 'files/c.txt'].map((v) => must(set.match('example11', entries('files', v))))
    assert.equal(new Set(shared.map((m) => m.counterKey)).size, 1)
    assert.equal(limitOf(shared[0]), '10/hour')
    assert.equal(shared[0]?.metricKey, 'example11.files_files/*')
    const apart = ['files_no_share/a.pdf', 'files_no_share/b.csv'].map((v) => must(set.match('example11', entries('files_no_share', v))))
    assert.equal(new Set(apart.map((m) => m.counterKey)).size, 2)
    assert.equal(apart[0]?.metricKey, 'example11.files_no_share_files_no_share/*')
  })

  it('example 11 with value_to_metric: the metric key keeps the pattern (as the code does; the README prose says route_api.method_GET)', () => {
    const set = parse(
      yaml(
        'domain: example11_metrics',
        'descriptors:',
        '  - key: route',
        '    value: api/*',
        '    share_threshold: true',
        '    value_to_metric: true',
        '    descriptors:',
        '      - key: method',
        '        rate_limit: { unit: minute, requests_per_unit: 60 }',
      ),
    )
    const v1 = must(set.match('example11_metrics', entries('route', 'api/v1', 'method', 'GET')))
    const v2 = must(set.match('example11_metrics', entries('route', 'api/v2', 'method', 'GET')))
    const post = must(set.match('example11_metrics', entries('route', 'api/v2', 'method', 'POST')))
    assert.equal(v1.metricKey, 'example11_metrics.route_api/*.method')
    assert.equal(v1.counterKey, v2.counterKey)
    assert.notEqual(v1.counterKey, post.counterKey)
  })
})

describe('domain config: matching', () => {
  const set = parse(
    yaml(
      'domain: shop',
      'descriptors:',
      '  - key: path',
      '    value: /exact',
      '    rate_limit: { unit: second, requests_per_unit: 1 }',
      '  - key: path',
      '    value: /ex*',
      '    rate_limit: { unit: second, requests_per_unit: 2 }',
      '  - key: path',
      '    value: /e*',
      '    share_threshold: true',
      '    rate_limit: { unit: second, requests_per_unit: 3 }',
      '  - key: path',
      '    rate_limit: { unit: second, requests_per_unit: 4 }',
      '  - key: path',
      '    value: /free',
      '  - key: tier',
      '    value: gold',
      '    rate_limit: { unit: week, requests_per_unit: 7 }',
      '    descriptors:',
      '      - key: user',
      '        rate_limit: { unit: Month, requests_per_unit: 8 }',
    ),
  )

  it('tries key and value, then the patterns in config order, then the key alone', () => {
    assert.equal(limitOf(set.match('shop', entries('path', '/exact'))), '1/second')
    assert.equal(limitOf(set.match('shop', entries('path', '/exa'))), '2/second')
    assert.equal(limitOf(set.match('shop', entries('path', '/else'))), '3/second')
    assert.equal(limitOf(set.match('shop', entries('path', '/other'))), '4/second')
  })

  it('allows a value that has a descriptor without rate_limit', () => {
    assert.equal(set.match('shop', entries('path', '/free')), undefined)
  })

  it('counts a value spelled as a shared pattern with the values the pattern matches', () => {
    const literal = must(set.match('shop', entries('path', '/e*')))
    assert.equal(literal.counterKey, must(set.match('shop', entries('path', '/else'))).counterKey)
  })

  it('applies a rule with children to a request that ends at it, and its child to a deeper one', () => {
    const gold = must(set.match('shop', entries('tier', 'gold')))
    assert.equal(limitOf(gold), '7/week')
    assert.equal(gold.rule.windowSeconds, 604_800)
    assert.equal(limitOf(set.match('shop', entries('tier', 'gold', 'user', 'u1'))), '8/month')
    assert.equal(set.match('shop', entries('tier', 'gold', 'user', 'u1', 'extra', 'x')), undefined)
    assert.equal(set.match('shop', entries('tier', 'silver')), undefined)
    assert.equal(set.match('shop', []), undefined)
    assert.equal(set.hasDomain('shop'), true)
    assert.equal(set.hasDomain('nope'), false)
  })

  it('reads units case-insensitively and gives the reference window lengths', () => {
    assert.deepEqual(UNIT_SECONDS, { second: 1, minute: 60, hour: 3600, day: 86400, week: 604800, month: 2592000, year: 31536000 })
    const r = parse(
      yaml(
        'domain: u',
        'descriptors:',
        ...['SECOND', 'Minute', 'hour', 'DAY', 'week', 'month', 'Year'].map(
          (u, i) => `  - { key: k${i}, rate_limit: { unit: ${u}, requests_per_unit: 1 } }`,
        ),
      ),
    )
    assert.deepEqual(
      [...r.rules()].map((x) => [x.unit, x.windowSeconds]),
      Object.entries(UNIT_SECONDS),
    )
  })

  it('gives every rule an id, its file, its path and the reference stats key', () => {
    const rules = [...set.rules()]
    assert.deepEqual(
      rules.map((r) => r.id),
      rules.map((_, i) => i),
    )
    const user = rules.find((r) => r.statsKey === 'shop.tier_gold.user')
    assert.equal(user?.path, 'descriptors.5.descriptors.0')
    assert.equal(user?.file, 'rl.yaml')
    assert.equal(rules.find((r) => r.requestsPerUnit === 2)?.statsKey, 'shop.path_/ex*')
  })

  it('matches patterns against the whole key_value, as the reference does', () => {
    const s = parse(yaml('domain: d', 'descriptors:', '  - key: "a*"', '    rate_limit: { unit: second, requests_per_unit: 1 }'))
    assert.equal(limitOf(s.match('d', entries('abc', 'x'))), '1/second')
    assert.equal(s.match('d', entries('b', 'a')), undefined)
  })

  it('reads YAML as yaml.v2 does: yes is true, numbers are their text, anchors and merge keys work', () => {
    const s = parse(
      yaml(
        'domain: 42',
        'descriptors:',
        '  - key: status',
        '    value: 0200',
        '    shadow_mode: yes',
        '    rate_limit: &limit { unit: minute, requests_per_unit: 0x10 }',
        '  - key: flag',
        '    value: on',
        '    rate_limit:',
        '      <<: *limit',
        '      requests_per_unit: 3',
        '  - key: date',
        '    value: 2024-01-02',
        '    rate_limit: *limit',
      ),
    )
    const status = must(s.match('42', entries('status', '0200')))
    assert.equal(limitOf(status), '16/minute shadow')
    assert.equal(limitOf(s.match('42', entries('flag', 'on'))), '3/minute')
    assert.equal(limitOf(s.match('42', entries('date', '2024-01-02'))), '16/minute')
  })

  it('keeps quota_mode and metadata', () => {
    const s = parse(
      yaml(
        'domain: q',
        'descriptors:',
        '  - key: k',
        '    quota_mode: true',
        '    metadata: { owner: team-a, tags: [x, z] }',
        '    rate_limit: { unit: day, requests_per_unit: 1 }',
      ),
    )
    const r = must(s.match('q', entries('k', 'v'))).rule
    assert.equal(r.quotaMode, true)
    assert.deepEqual(r.metadata, { owner: 'team-a', tags: ['x', 'z'] })
  })
})

describe('domain config: metric keys', () => {
  it('detailed_metric: the request values, at whatever depth the rule is', () => {
    const s = parse(
      yaml(
        'domain: n',
        'descriptors:',
        '  - key: a',
        '    detailed_metric: true',
        '    rate_limit: { unit: minute, requests_per_unit: 100 }',
        '    descriptors:',
        '      - key: b',
        '        rate_limit: { unit: minute, requests_per_unit: 5 }',
        '      - key: c',
        '        detailed_metric: true',
        '        rate_limit: { unit: minute, requests_per_unit: 5 }',
      ),
    )
    assert.equal(must(s.match('n', entries('a', '1'))).metricKey, 'n.a_1')
    assert.equal(must(s.match('n', entries('a', '1', 'b', '2'))).metricKey, 'n.a.b')
    assert.equal(must(s.match('n', entries('a', '1', 'c', '3'))).metricKey, 'n.a_1.c_3')
    assert.equal(must(s.match('n', entries('a', '', 'c', '3'))).metricKey, 'n.a_.c_3')
  })

  it('value_to_metric: only where set, and never an empty value', () => {
    const s = parse(
      yaml(
        'domain: v',
        'descriptors:',
        '  - key: a',
        '    descriptors:',
        '      - key: b',
        '        value_to_metric: true',
        '        descriptors:',
        '          - key: c',
        '            rate_limit: { unit: second, requests_per_unit: 1 }',
      ),
    )
    assert.equal(must(s.match('v', entries('a', 'X', 'b', 'Y', 'c', 'Z'))).metricKey, 'v.a.b_Y.c')
    assert.equal(must(s.match('v', entries('a', 'X', 'b', '', 'c', 'Z'))).metricKey, 'v.a.b.c')
  })

  it('share_threshold: the pattern wins over detailed_metric and value_to_metric; other wildcards keep theirs', () => {
    const s = parse(
      yaml(
        'domain: s',
        'descriptors:',
        '  - key: svc',
        '    value: svc/*',
        '    share_threshold: true',
        '    descriptors:',
        '      - key: endpoint',
        '        detailed_metric: true',
        '        rate_limit: { unit: minute, requests_per_unit: 80 }',
        '  - key: wild',
        '    value: foo*',
        '    descriptors:',
        '      - key: other',
        '        value_to_metric: true',
        '        descriptors:',
        '          - key: limit',
        '            rate_limit: { unit: minute, requests_per_unit: 20 }',
        '  - key: runtime',
        '    value: foo*',
        '    value_to_metric: true',
        '    rate_limit: { unit: minute, requests_per_unit: 20 }',
      ),
    )
    assert.equal(must(s.match('s', entries('svc', 'svc/user', 'endpoint', 'get'))).metricKey, 's.svc_svc/*.endpoint_get')
    assert.equal(must(s.match('s', entries('wild', 'foo1', 'other', 'bar', 'limit', 'X'))).metricKey, 's.wild_foo*.other_bar.limit')
    assert.equal(must(s.match('s', entries('runtime', 'foo1'))).metricKey, 's.runtime_foo1')
    // two levels of shared patterns: one counter for all their values
    const a = must(s.match('s', entries('svc', 'svc/a', 'endpoint', 'get')))
    const b = must(s.match('s', entries('svc', 'svc/b', 'endpoint', 'get')))
    assert.equal(a.counterKey, b.counterKey)
  })
})

describe('domain config: extensions (algorithm, sync_rate)', () => {
  const text = yaml(
    'domain: ext',
    'descriptors:',
    '  - key: plain',
    '    rate_limit: { unit: second, requests_per_unit: 1 }',
    '  - key: counter',
    '    rate_limit: { unit: second, requests_per_unit: 1, algorithm: sliding-window-counter-algo, sync_rate: 0.5 }',
    '  - key: counter_default',
    '    rate_limit: { unit: second, requests_per_unit: 1, algorithm: sliding-window-counter-algo }',
    '  - key: log',
    '    rate_limit: { unit: second, requests_per_unit: 1, algorithm: sliding-window-algo }',
  )

  it('lets a rule choose its algorithm and sync rate, and applies the defaults otherwise', () => {
    const s = parse(text, 'ext.yaml', { algorithm: 'fixed-window-algo', syncRate: 0.1 })
    const of = (key: string) => must(s.match('ext', entries(key, 'x'))).rule
    assert.deepEqual([of('plain').algorithm, of('plain').syncRate], ['fixed-window-algo', undefined])
    assert.deepEqual([of('counter').algorithm, of('counter').syncRate], ['sliding-window-counter-algo', 0.5])
    assert.deepEqual([of('counter_default').algorithm, of('counter_default').syncRate], ['sliding-window-counter-algo', 0.1])
    assert.deepEqual([of('log').algorithm, of('log').syncRate], ['sliding-window-algo', undefined])
    const counterDefault = parse(text, 'ext.yaml', { algorithm: 'sliding-window-counter-algo', syncRate: -1 })
    assert.deepEqual([must(counterDefault.match('ext', entries('plain', 'x'))).rule.syncRate], [-1])
  })

  it('refuses a bad algorithm or sync rate', () => {
    const lines = problems(
      yaml(
        'domain: ext',
        'descriptors:',
        '  - key: a',
        '    rate_limit: { unit: second, requests_per_unit: 1, algorithm: token-bucket }',
        '  - key: b',
        '    rate_limit: { unit: second, requests_per_unit: 1, algorithm: sliding-window-counter-algo, sync_rate: 0.0001 }',
        '  - key: c',
        '    rate_limit: { unit: second, requests_per_unit: 1, sync_rate: 1 }',
        '  - key: d',
        '    rate_limit: { unit: second, requests_per_unit: 1, algorithm: sliding-window-counter-algo, sync_rate: fast }',
        '  - key: e',
        '    rate_limit: { unlimited: true, algorithm: sliding-window-algo }',
      ),
    )
    assert.match(
      lines[0] ?? '',
      /^bad\.yaml:4:66: descriptors\.0\.rate_limit\.algorithm: must be one of fixed-window-algo, sliding-window-algo, sliding-window-counter-algo, got "token-bucket"$/,
    )
    assert.match(
      lines[1] ?? '',
      /^bad\.yaml:6:\d+: descriptors\.1\.rate_limit\.sync_rate: must be 0 \(every hit\), < 0 \(local only\) or at least 0\.001 s, got 0\.0001$/,
    )
    assert.match(
      lines[2] ?? '',
      /^bad\.yaml:8:\d+: descriptors\.2\.rate_limit\.sync_rate: only sliding-window-counter-algo syncs; this rule uses fixed-window-algo$/,
    )
    assert.match(lines[3] ?? '', /^bad\.yaml:10:\d+: descriptors\.3\.rate_limit\.sync_rate: must be a number of seconds, got "fast"$/)
    assert.match(lines[4] ?? '', /^bad\.yaml:12:\d+: descriptors\.4\.rate_limit\.algorithm: has no effect on an unlimited rule/)
    assert.equal(lines.length, 5)
  })
})

describe('domain config: errors', () => {
  const cases: Array<[string, string, RegExp]> = [
    ['bad YAML', "domain: x\n  descriptors: '''\n", /^bad\.yaml:\d+:\d+: invalid YAML: /],
    ['an unterminated quote', "'''\n", /^bad\.yaml:\d+:\d+: invalid YAML: /],
    ['an empty file', '# nothing\n', /^bad\.yaml: domain: is required: the file is empty/],
    ['a list as the document', '- a\n', /^bad\.yaml:1:1: must be a mapping \(domain and descriptors\), got a list$/],
    ['a missing domain', 'descriptors: []\n', /^bad\.yaml:1:1: domain: is required: every file names its domain$/],
    ['an empty domain', 'domain: ""\n', /^bad\.yaml:1:9: domain: must not be empty$/],
    ['a non-string key', yaml('0.25: test-domain', 'descriptors: []'), /^bad\.yaml:1:1: 0\.25: keys must be strings, got 0\.25$/],
    [
      'a misspelled top-level key',
      yaml('domain: d', 'descriptor: []'),
      /^bad\.yaml:2:1: descriptor: unknown key; expected one of domain, descriptors$/,
    ],
    [
      'a misspelled rate_limit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    ratelimit: { unit: second, requests_per_unit: 1 }'),
      /^bad\.yaml:4:5: descriptors\.0\.ratelimit: unknown key; expected one of key, value, rate_limit, /,
    ],
    [
      'a misspelled requests_per_unit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit:', '      unit: day', '      requestsperunit: 5'),
      /^bad\.yaml:6:7: descriptors\.0\.rate_limit\.requestsperunit: unknown key; expected one of unit, requests_per_unit, /,
    ],
    [
      'a key of another level',
      yaml('domain: d', 'descriptors:', '  - key: k', '    unit: second'),
      /^bad\.yaml:4:5: descriptors\.0\.unit: unknown key \(unit belongs in rate_limit\); expected one of /,
    ],
    [
      'a list of strings for descriptors',
      yaml('domain: d', 'descriptors:', '  - a', '  - b'),
      /^bad\.yaml:3:5: descriptors\.0: must be a mapping \(a descriptor with key.*\), got "a"$/,
    ],
    [
      'a mapping for descriptors',
      yaml('domain: d', 'descriptors: { key: k }'),
      /^bad\.yaml:2:14: descriptors: must be a list, got a mapping$/,
    ],
    [
      'a list for rate_limit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: [1]'),
      /^bad\.yaml:4:17: descriptors\.0\.rate_limit: must be a mapping \(unit and requests_per_unit, or unlimited: true\), got a list$/,
    ],
    [
      'a missing key',
      yaml('domain: d', 'descriptors:', '  - value: v'),
      /^bad\.yaml:3:5: descriptors\.0\.key: is required: every descriptor has a key$/,
    ],
    [
      'an empty key',
      yaml('domain: d', 'descriptors:', '  - key: ""', '    value: v'),
      /^bad\.yaml:3:10: descriptors\.0\.key: must not be empty$/,
    ],
    [
      'a duplicate key and value',
      yaml('domain: d', 'descriptors:', '  - key: k', '    value: v', '  - key: k', '    value: v'),
      /^bad\.yaml:5:5: descriptors\.1: duplicate descriptor d\.k_v \(the same key and value as descriptors\.0\)$/,
    ],
    [
      'a duplicate through the key_value spelling',
      yaml('domain: d', 'descriptors:', '  - key: k', '    descriptors:', '      - key: a_b', '      - key: a', '        value: b'),
      /^bad\.yaml:6:9: descriptors\.0\.descriptors\.1: duplicate descriptor d\.k\.a_b \(the same key and value as descriptors\.0\.descriptors\.0\)$/,
    ],
    [
      'an unknown unit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { unit: foo, requests_per_unit: 1 }'),
      /^bad\.yaml:4:25: descriptors\.0\.rate_limit\.unit: must be one of second, minute, hour, day, week, month, year, got "foo"$/,
    ],
    [
      'the UNKNOWN unit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { unit: unknown, requests_per_unit: 1 }'),
      /rate_limit\.unit: must be one of .*, got "unknown"$/,
    ],
    [
      'a missing unit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { requests_per_unit: 1 }'),
      /^bad\.yaml:4:17: descriptors\.0\.rate_limit\.unit: is required: one of second, .* \(or unlimited: true\)$/,
    ],
    [
      'unlimited with a unit',
      yaml(
        'domain: d',
        'descriptors:',
        '  - key: k',
        '    rate_limit:',
        '      unlimited: true',
        '      unit: day',
        '      requests_per_unit: 25',
      ),
      /^bad\.yaml:6:13: descriptors\.0\.rate_limit\.unit: must not be given with unlimited: true/,
    ],
    [
      'a negative requests_per_unit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { unit: day, requests_per_unit: -1 }'),
      /rate_limit\.requests_per_unit: must be an integer from 0 to 4294967295, got -1$/,
    ],
    [
      'a fractional requests_per_unit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { unit: day, requests_per_unit: 1.0 }'),
      /descriptors\.0\.rate_limit\.requests_per_unit: must be an integer from 0 to 4294967295, got 1\.0$/,
    ],
    [
      'a quoted requests_per_unit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { unit: day, requests_per_unit: "5" }'),
      /requests_per_unit: must be an integer from 0 to 4294967295, got "5"$/,
    ],
    [
      'a requests_per_unit above uint32',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { unit: day, requests_per_unit: 4294967296 }'),
      /requests_per_unit: must be an integer/,
    ],
    [
      'a missing requests_per_unit',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { unit: day }'),
      /descriptors\.0\.rate_limit\.requests_per_unit: is required \(0 denies every request\)$/,
    ],
    [
      'an empty replaces name',
      yaml(
        'domain: d',
        'descriptors:',
        '  - key: k',
        '    rate_limit:',
        '      unit: day',
        '      requests_per_unit: 1',
        '      replaces:',
        '        - name: ""',
      ),
      /^bad\.yaml:8:17: descriptors\.0\.rate_limit\.replaces\.0\.name: must name the rule to replace \(empty\)$/,
    ],
    [
      'a replaces entry without name',
      yaml(
        'domain: d',
        'descriptors:',
        '  - key: k',
        '    rate_limit:',
        '      unit: day',
        '      requests_per_unit: 1',
        '      replaces:',
        '        - {}',
      ),
      /descriptors\.0\.rate_limit\.replaces\.0\.name: must name the rule to replace \(empty\)$/,
    ],
    [
      'a rule replacing itself',
      yaml(
        'domain: d',
        'descriptors:',
        '  - key: k',
        '    rate_limit:',
        '      name: me',
        '      unit: day',
        '      requests_per_unit: 1',
        '      replaces: [{ name: me }]',
      ),
      /^bad\.yaml:8:26: descriptors\.0\.rate_limit\.replaces\.0\.name: is this rule's own name \("me"\): a rule cannot replace itself$/,
    ],
    [
      'replaces as strings',
      yaml('domain: d', 'descriptors:', '  - key: k', '    rate_limit: { unit: day, requests_per_unit: 1, replaces: [other] }'),
      /descriptors\.0\.rate_limit\.replaces\.0: must be a mapping \(name: <the name of the rule to replace>\), got "other"$/,
    ],
    [
      'share_threshold without a wildcard',
      yaml('domain: d', 'descriptors:', '  - key: k', '    value: v', '    share_threshold: true'),
      /^bad\.yaml:5:5: descriptors\.0\.share_threshold: needs a wildcard value \(one with "\*"\); "k_v" has none$/,
    ],
    [
      'a string for a flag',
      yaml('domain: d', 'descriptors:', '  - key: k', '    shadow_mode: "true"'),
      /^bad\.yaml:4:18: descriptors\.0\.shadow_mode: must be true or false, got "true"$/,
    ],
    [
      'an unquoted decimal value',
      yaml('domain: d', 'descriptors:', '  - key: version', '    value: 1.5'),
      /^bad\.yaml:4:12: descriptors\.0\.value: must be a string, got the number 1\.5; quote it \("1\.5"\)$/,
    ],
    [
      'metadata that is not a mapping',
      yaml('domain: d', 'descriptors:', '  - key: k', '    metadata: [a]'),
      /descriptors\.0\.metadata: must be a mapping, got a list$/,
    ],
    ['a duplicate YAML key', yaml('domain: d', 'domain: e'), /^bad\.yaml:2:1: invalid YAML: Map keys must be unique/],
  ]
  for (const [what, text, expected] of cases) {
    it(`refuses ${what}, naming the file and the key path`, () => {
      const lines = problems(text)
      assert.match(lines[0] ?? '', expected, lines.join('\n'))
    })
  }

  it('reports every problem of a file, deep in the tree', () => {
    const lines = problems(
      yaml(
        'domain: d',
        'descriptors:',
        '  - key: a',
        '    descriptors:',
        '      - key: b',
        '        rate_limit: { unit: fortnight, requests_per_unit: 1 }',
        '      - key: c',
        '        rate_limits: {}',
      ),
    )
    assert.deepEqual(
      lines.map((l) => l.replace(/: .*/, '')),
      ['bad.yaml:6:29', 'bad.yaml:8:9'],
    )
    assert.match(lines[0] ?? '', /descriptors\.0\.descriptors\.0\.rate_limit\.unit: /)
    assert.match(lines[1] ?? '', /descriptors\.0\.descriptors\.1\.rate_limits: unknown key/)
  })

  it('refuses a domain defined by two files, naming both, unless mergeDomains is set', () => {
    const one = {
      file: 'one.yaml',
      text: yaml('domain: d', 'descriptors:', '  - key: a', '    rate_limit: { unit: minute, requests_per_unit: 10 }'),
    }
    const two = {
      file: 'two.yaml',
      text: yaml('domain: d', 'descriptors:', '  - key: b', '    rate_limit: { unit: minute, requests_per_unit: 20 }'),
    }
    assert.deepEqual(problems([one, two]), [
      'two.yaml:1:9: domain: duplicate domain "d": one.yaml defines it too (mergeDomains merges the files of a domain)',
    ])
    const merged = parseDomainFiles([one, two], DEFAULTS, { mergeDomains: true })
    assert.equal(limitOf(merged.match('d', entries('a', 'x'))), '10/minute')
    assert.equal(limitOf(merged.match('d', entries('b', 'x'))), '20/minute')
    assert.deepEqual([...merged.domains()], ['d'])
    // merged files may still not define one descriptor twice
    assert.deepEqual(problems([one, { ...one, file: 'again.yaml' }], { mergeDomains: true }), [
      'again.yaml:3:5: descriptors.0: duplicate descriptor d.a (the same key and value as descriptors.0 in one.yaml)',
    ])
  })

  it('stops an alias bomb', () => {
    const bomb = yaml('domain: d', `descriptors: [&k { key: x }, ${Array.from({ length: 1001 }, () => '*k').join(', ')}]`)
    assert.match(problems(bomb).at(-1) ?? '', /^bad\.yaml: more than 1000 alias uses; expand the anchors$/)
  })
})

describe('domain config: loadDomains', () => {
  it('reads the *.yaml and *.yml files of a directory in name order, skipping hidden files and other names', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'rl-domains-'))
    try {
      await writeFile(
        path.join(dir, 'b.yml'),
        yaml('domain: beta', 'descriptors:', '  - key: k', '    rate_limit: { unit: hour, requests_per_unit: 2 }'),
      )
      await writeFile(
        path.join(dir, 'a.yaml'),
        yaml('domain: alpha', 'descriptors:', '  - key: k', '    rate_limit: { unit: hour, requests_per_unit: 1 }'),
      )
      await writeFile(path.join(dir, '.hidden.yaml'), 'not: [valid')
      await writeFile(path.join(dir, 'notes.txt'), 'not yaml')
      await mkdir(path.join(dir, 'sub.yaml'))
      const set = await loadDomains(dir, DEFAULTS)
      assert.deepEqual(set.files, [path.join(dir, 'a.yaml'), path.join(dir, 'b.yml')])
      assert.deepEqual([...set.domains()], ['alpha', 'beta'])
      assert.equal(must(set.match('beta', entries('k', 'v'))).rule.file, path.join(dir, 'b.yml'))
      const single = await loadDomains(path.join(dir, 'a.yaml'), DEFAULTS)
      assert.deepEqual([...single.domains()], ['alpha'])
      // a problem names the file it is in
      await writeFile(path.join(dir, 'c.yaml'), yaml('domain: alpha'))
      await assert.rejects(loadDomains(dir, DEFAULTS), (err: unknown) => {
        assert.ok(err instanceof ConfigFileError)
        assert.equal(err.file, path.join(dir, 'c.yaml'))
        assert.match(err.message, /c\.yaml:1:9: domain: duplicate domain "alpha": .*a\.yaml defines it too/)
        return true
      })
      const merged = await loadDomains(dir, DEFAULTS, { mergeDomains: true })
      assert.equal([...merged.rules()].length, 2)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('refuses a missing path and a directory without YAML files', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'rl-domains-'))
    try {
      await assert.rejects(loadDomains(path.join(dir, 'none.yaml'), DEFAULTS), /none\.yaml: file not found/)
      await assert.rejects(loadDomains(dir, DEFAULTS), /holds no \*\.yaml or \*\.yml file/)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})

describe('domain config: counter keys', () => {
  it('spells a counter key as domain|key|=value…, escaping % and | and lone surrogates', () => {
    const s = parse(
      yaml(
        'domain: "sh|op%"',
        'descriptors:',
        '  - { key: "k|", rate_limit: { unit: second, requests_per_unit: 1 } }',
        '  - { key: f, value: "a*", share_threshold: true, rate_limit: { unit: second, requests_per_unit: 1 } }',
      ),
    )
    assert.equal(must(s.match('sh|op%', entries('k|', 'v%|\uD800'))).counterKey, 'sh%7Cop%25|k%7C|=v%25%7C%uD800')
    assert.equal(must(s.match('sh|op%', entries('k|', '\uD83D\uDE00'))).counterKey, 'sh%7Cop%25|k%7C|=\uD83D\uDE00')
    assert.equal(must(s.match('sh|op%', entries('f', 'abc'))).counterKey, 'sh%7Cop%25|f|*f_a*')
  })

  const KEYS = ['a', 'b', 'a_b', 'a|b', 'a%7Cb', '%', '|', 'a.b']
  const DOMAINS = ['d', 'd|a', 'd%7Ca', 'd_a', '%', 'd.a']
  const config = DOMAINS.map((d) =>
    yaml(
      `domain: ${JSON.stringify(d)}`,
      'descriptors:',
      ...KEYS.flatMap((k) => [
        `  - key: ${JSON.stringify(k)}`,
        '    rate_limit: { unit: second, requests_per_unit: 1 }',
        '    descriptors:',
        ...KEYS.map((k2) => `      - { key: ${JSON.stringify(k2)}, rate_limit: { unit: second, requests_per_unit: 2 } }`),
      ]),
    ),
  )
  const set = parseDomainFiles(
    config.map((text, i) => ({ file: `d${i}.yaml`, text })),
    DEFAULTS,
  )
  const text = fc.string({ unit: fc.constantFrom('a', 'b', '_', '|', '%', '7', 'C', '.', '\uD800', '\uDC00', '\u00e9'), maxLength: 5 })
  const request = fc.record({
    domain: fc.constantFrom(...DOMAINS),
    entries: fc.array(fc.record({ key: fc.constantFrom(...KEYS), value: text }), { minLength: 1, maxLength: 2 }),
  })

  it('gives two requests one counter only when they are the same request (no share_threshold)', () => {
    fc.assert(
      fc.property(request, request, (r1, r2) => {
        const m1 = must(set.match(r1.domain, r1.entries))
        const m2 = must(set.match(r2.domain, r2.entries))
        const same = r1.domain === r2.domain && JSON.stringify(r1.entries) === JSON.stringify(r2.entries)
        assert.equal(m1.counterKey === m2.counterKey, same)
        // well-formed Unicode: a lone surrogate would make encodeURIComponent throw
        encodeURIComponent(m1.counterKey)
      }),
      { numRuns: 2000 },
    )
  })

  it('shares a counter among the values of a shared wildcard, and only there', () => {
    const shared = parse(
      yaml(
        'domain: s',
        'descriptors:',
        '  - { key: k, value: "f*", share_threshold: true, rate_limit: { unit: second, requests_per_unit: 1 } }',
        '  - { key: k, value: fx, rate_limit: { unit: second, requests_per_unit: 2 } }',
        '  - { key: k, value: "g*", rate_limit: { unit: second, requests_per_unit: 3 } }',
        '  - { key: k, rate_limit: { unit: second, requests_per_unit: 4 } }',
        '  - key: n',
        '    value: "p*"',
        '    share_threshold: true',
        '    descriptors:',
        '      - { key: k, value: "f*", share_threshold: true, rate_limit: { unit: second, requests_per_unit: 5 } }',
        '      - { key: k, rate_limit: { unit: second, requests_per_unit: 6 } }',
      ),
    )
    // what the reference counts: a shared pattern stands for every value it matches
    const model = (es: readonly DomainEntry[]): string => {
      return JSON.stringify(
        es.map((e, i) => {
          if (e.key === 'n' && i === 0 && e.value.startsWith('p')) return ['n', 'shared p*']
          // fx has a descriptor of its own at the top level only
          if (e.key === 'k' && e.value.startsWith('f') && !(i === 0 && e.value === 'fx')) return ['k', `shared f* at ${i}`]
          return [e.key, e.value]
        }),
      )
    }
    // the patterns' own spellings come up often, so that they meet the values they match
    const value = fc.oneof(
      fc.string({ unit: fc.constantFrom('f', 'g', 'p', 'x', '*', '|', '%', '_'), maxLength: 4 }),
      fc.constantFrom('f*', 'fx', 'g*', 'p*', 'f', ''),
    )
    const req = fc.oneof(
      fc.tuple(value).map(([v]) => entries('k', v)),
      fc.tuple(value, value).map(([a, b]) => entries('n', a, 'k', b)),
    )
    fc.assert(
      fc.property(req, req, (e1, e2) => {
        const m1 = shared.match('s', e1)
        const m2 = shared.match('s', e2)
        fc.pre(m1 !== undefined && m2 !== undefined)
        assert.equal(m1?.counterKey === m2?.counterKey, model(e1) === model(e2), `${JSON.stringify(e1)} vs ${JSON.stringify(e2)}`)
      }),
      { numRuns: 3000 },
    )
  })
})
