"""An ERP-side client of ap-intake's OAuth 2.0 token endpoint, written as integrators write
one with requests-oauthlib: the client-credentials grant (BackendApplicationClient), the
client authenticated with HTTP Basic (client_secret_basic) or in the form
(client_secret_post), then one POST with the token the session holds.

usage: oauth_client.py BASE_URL CLIENT_ID CLIENT_SECRET basic|post PATH BODY_FILE
prints one line of JSON: the token response's token_type, scope and expires_in, and the
POST's status and body.
"""

import json
import sys

from oauthlib.oauth2 import BackendApplicationClient
from requests.auth import HTTPBasicAuth
from requests_oauthlib import OAuth2Session


def main() -> None:
    base, client_id, secret, method, path, body_file = sys.argv[1:7]
    session = OAuth2Session(client=BackendApplicationClient(client_id=client_id))
    token_url = base + "/oauth2/token"
    if method == "basic":
        token = session.fetch_token(token_url=token_url, auth=HTTPBasicAuth(client_id, secret))
    else:
        token = session.fetch_token(
            token_url=token_url,
            client_id=client_id,
            client_secret=secret,
            include_client_id=True,
        )
    with open(body_file, "rb") as f:
        body = f.read()
    reply = session.post(base + path, data=body, headers={"Content-Type": "application/json"})
    print(
        json.dumps(
            {
                "token_type": token["token_type"],
                "scope": token.get("scope"),
                "expires_in": token.get("expires_in"),
                "status": reply.status_code,
                "body": reply.json(),
            }
        )
    )


if __name__ == "__main__":
    main()
