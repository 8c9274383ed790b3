"""``layang send``: send one message through a running service's HTTP API, with the SDK."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from layang.config import Config, ConfigError
from layang_client import Layang, LayangError, url_of_bind


def default_base_url(config: Config) -> str:
    """The service on this machine: ``http://`` + its HTTP bind address (a listen-on-all
    address replaced by the loopback one)."""
    return url_of_bind(config.http_bind)


def local_config() -> Config:
    """The configuration of the service on this machine, whose address is the default."""
    try:
        return Config.from_env(store_secret=False)  # sending signs nothing here
    except ConfigError as error:
        raise click.UsageError(str(error)) from None


def substitution_data(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        data = json.loads(value)
    except ValueError as error:
        raise click.BadParameter(f"not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise click.BadParameter("must be a JSON object")
    return data


FilePath = click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)


@click.command("send")
@click.option("--to", "to", multiple=True, required=True, metavar="ADDR", help="Repeatable.")
@click.option("--cc", multiple=True, metavar="ADDR", help="Repeatable.")
@click.option("--bcc", multiple=True, metavar="ADDR", help="Repeatable.")
@click.option("--from", "from_", required=True, metavar="ADDR", help='"a@x" or "Name <a@x>".')
@click.option("--subject", metavar="S", help="Required unless the template has one.")
@click.option("--text", metavar="T", help="The plain-text body.")
@click.option("--html-file", type=FilePath, help="A file holding the HTML body (UTF-8).")
@click.option("--template", "template_id", metavar="ID", help="Send a stored template.")
@click.option(
    "--data",
    callback=substitution_data,
    metavar="JSON",
    help="The template's substitution data, a JSON object.",
)
@click.option("--attach", multiple=True, type=FilePath, help="A file to attach. Repeatable.")
@click.option(
    "--key",
    envvar=["LAYANG_API_KEY", "LAYANG_KEY"],
    show_envvar=True,
    help="The API key ($LAYANG_KEY is read too).",
)
@click.option(
    "--base-url",
    envvar="LAYANG_BASE_URL",
    show_envvar=True,
    help="The service, default http://$LAYANG_HTTP_BIND (127.0.0.1:8000).",
)
def send(
    to: tuple[str, ...],
    cc: tuple[str, ...],
    bcc: tuple[str, ...],
    from_: str,
    subject: str | None,
    text: str | None,
    html_file: Path | None,
    template_id: str | None,
    data: dict[str, Any] | None,
    attach: tuple[Path, ...],
    key: str | None,
    base_url: str | None,
) -> None:
    """Send a message through the HTTP API; prints {"transmissionId"}.

    On an error answer, prints its error body on stderr and exits 1.
    """
    if not key:
        raise click.UsageError("Give --key or set LAYANG_API_KEY.")
    html = html_file.read_text(encoding="utf-8") if html_file else None
    base_url = base_url or default_base_url(local_config())
    try:
        with Layang(key, base_url=base_url) as client:
            transmission_id = client.send(
                from_=from_,
                to=list(to),
                cc=list(cc) or None,
                bcc=list(bcc) or None,
                subject=subject,
                body_text=text,
                body_html=html,
                template_id=template_id,
                substitution_data=data,
                attachments=list(attach) or None,
            )
    except LayangError as error:
        click.echo(json.dumps(error.to_dict()), err=True)
        sys.exit(1)
    click.echo(json.dumps({"transmissionId": transmission_id}))
