"""Django's makemessages, extracting errors' messages too: `N_(template, **values)` (in
boxyard/errors.py) marks an error's English template for translation, and xgettext learns that
name here. The dashboard shows the template translated (`error.localized()`); the API keeps
the English."""

from django.core.management.commands import makemessages


class Command(makemessages.Command):
    xgettext_options = [*makemessages.Command.xgettext_options, "--keyword=N_"]
