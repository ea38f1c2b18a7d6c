"""The bot API's sandbox routes, by resource: parse, fetch what the caller may see, call one
service, present the answer. Shapes and presenters are in `sandboxes.schemas`; errors are
mapped once, in `config.api`."""

from ninja import Router

from sandboxes.api import code, execs, files, links, raw, sandboxes, shells

router = Router()
for routes in (sandboxes, execs, code, files, raw, links, shells):
    router.add_router("", routes.router)
