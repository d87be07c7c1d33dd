// A local OpenID provider for the integration tests: it issues client-credentials access
// tokens as signed JWTs (typ at+jwt) for the resource api://ap-intake and publishes its keys,
// so the tests can check the service's token validation end to end, key rotation included.
//
//   node tests/clients/idp.mjs genkey RS256|ES256 KID
//       prints one private JWK (one line of JSON) with kid, alg and use "sig"
//   node tests/clients/idp.mjs serve --keys FILE --port N [--roles]
//       FILE: a JSON array of private JWKs; the first signs, all are in the JWKS (to rotate,
//       restart with [new, old]). N = 0 picks a free port. Once listening it prints the one
//       line `listening http://127.0.0.1:PORT` on stdout (the issuer is that URL); the token
//       endpoint is /token, the JWKS /jwks. --roles moves the granted scopes into a `roles`
//       array claim (no `scope`), as Entra ID puts application permissions.
//       Clients: erp-idp (client_secret_basic) and erp-idp-post (client_secret_post), both
//       with the secret idp-secret and the client_credentials grant only.
//
// The packages live in target/ci-node/node_modules (installed by .ci/run from package.json and
// package-lock.json beside this file), not beside this script, and ESM ignores NODE_PATH.
// So they are resolved from AP_INTAKE_NODE_MODULES, that directory, or by default from the
// repository's target/ci-node/node_modules, and loaded by absolute file URL.

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const nodeModules = process.env.AP_INTAKE_NODE_MODULES
  || fileURLToPath(new URL('../../target/ci-node/node_modules/', import.meta.url));
const requireFrom = createRequire(join(nodeModules, 'resolve-from-here.js'));
const load = (name) => import(pathToFileURL(requireFrom.resolve(name)).href);

const RESOURCE = 'api://ap-intake';
const SCOPES = 'ap-intake.write general-ledger-codes-v1 vendor-data-v1';
const SECRET = 'idp-secret';

async function genkey(alg, kid) {
  if (!['RS256', 'ES256'].includes(alg) || !kid) {
    throw new Error('usage: idp.mjs genkey RS256|ES256 KID');
  }
  const { generateKeyPair, exportJWK } = await load('jose');
  const { privateKey } = await generateKeyPair(alg, { extractable: true });
  const jwk = { ...(await exportJWK(privateKey)), kid, alg, use: 'sig' };
  process.stdout.write(`${JSON.stringify(jwk)}\n`);
}

async function serve(args) {
  const opt = (name) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const keysFile = opt('--keys');
  const port = Number(opt('--port') ?? 0);
  if (!keysFile || !Number.isInteger(port)) {
    throw new Error('usage: idp.mjs serve --keys FILE --port N [--roles]');
  }
  const keys = JSON.parse(readFileSync(keysFile, 'utf8'));
  if (!Array.isArray(keys) || keys.length === 0) throw new Error(`${keysFile}: no keys`);
  const signing = { alg: keys[0].alg, kid: keys[0].kid };
  const roles = args.includes('--roles');

  const { default: Provider, errors } = await load('oidc-provider');
  const http = await import('node:http');

  // The issuer carries the port, known only once listening: bind first, then build the
  // provider and hand it the requests.
  let callback = (_req, res) => { res.statusCode = 503; res.end(); };
  const server = http.createServer((req, res) => callback(req, res));
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  const issuer = `http://127.0.0.1:${server.address().port}`;

  const client = { client_secret: SECRET, grant_types: ['client_credentials'], response_types: [], redirect_uris: [] };
  const provider = new Provider(issuer, {
    clients: [
      { ...client, client_id: 'erp-idp', token_endpoint_auth_method: 'client_secret_basic' },
      { ...client, client_id: 'erp-idp-post', token_endpoint_auth_method: 'client_secret_post' },
    ],
    jwks: { keys },
    // Fixed so the provider does not warn about generated cookie keys; no cookie is used.
    cookies: { keys: ['ap-intake-tests'] },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // Without a resource parameter the token is still a JWT for the service.
        defaultResource: async () => RESOURCE,
        getResourceServerInfo: async (_ctx, indicator) => {
          if (indicator !== RESOURCE) throw new errors.InvalidTarget();
          return {
            scope: SCOPES,
            audience: RESOURCE,
            accessTokenFormat: 'jwt',
            accessTokenTTL: 3600,
            jwt: { sign: signing },
          };
        },
      },
    },
    formats: {
      customizers: {
        jwt: roles
          ? async (_ctx, _token, jwt) => {
            jwt.payload.roles = jwt.payload.scope?.split(' ') ?? [];
            delete jwt.payload.scope;
          }
          : undefined,
      },
    },
  });
  provider.on('server_error', (_ctx, err) => console.error('idp:', err));
  callback = provider.callback();

  process.on('SIGTERM', () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
  });
  process.stdout.write(`listening ${issuer}\n`);
}

const [command, ...rest] = process.argv.slice(2);
try {
  if (command === 'genkey') await genkey(rest[0], rest[1]);
  else if (command === 'serve') await serve(rest);
  else throw new Error('usage: idp.mjs genkey ALG KID | serve --keys FILE --port N [--roles]');
} catch (err) {
  console.error(`idp: ${err.message}`);
  process.exit(2);
}
