"""Page tokens: every item exactly once, and a token only for the call that issued it."""

import base64

import pytest

from controller.api.paging import PageError, encode_token, page

NAMES = [f"job-{i:03d}" for i in range(25)]


def test_pages_cover_every_item_exactly_once():
    seen, token = [], ""
    while True:
        items, token = page(NAMES, 7, token, key=str, scope="ListJobs")
        seen += items
        if not token:
            break
    assert seen == NAMES


ALL_LINKS = "ListLinks?switch=&include_access=False"


@pytest.mark.parametrize(
    "token, scope, problem",
    [
        (encode_token(ALL_LINKS, "job-006"), "ListJobs", "another call"),  # another method's token
        (encode_token("ListLinks?switch=rys0&include_access=False", "x"), ALL_LINKS, "another call"),  # other filter
        (base64.urlsafe_b64encode(b"job-006").decode(), "ListJobs", "not a token this server issued"),  # old format
        ("!!not-a-token", "ListJobs", "not a token this server issued"),
    ],
)
def test_a_token_from_another_call_or_made_up_is_refused(token, scope, problem):
    with pytest.raises(PageError, match=problem) as err:
        page(NAMES, 7, token, key=str, scope=scope)
    assert err.value.field == "page_token"


def test_a_tampered_token_is_refused():
    _, token = page(NAMES, 7, "", key=str, scope="ListJobs")
    _, _, check = token.partition(".")
    forged = base64.urlsafe_b64encode(b'["ListJobs","job-020"]').decode() + "." + check
    with pytest.raises(PageError, match="not a token this server issued"):
        page(NAMES, 7, forged, key=str, scope="ListJobs")
    assert page(NAMES, 7, token, key=str, scope="ListJobs")[0][0] == "job-007"  # the real one still works
