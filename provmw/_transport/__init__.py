"""The transport behind the :mod:`provmw.http` facade: wire errors mapped at one boundary,
foreign errors, bounded reads, server-sent events and retry hints."""
