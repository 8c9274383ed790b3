"""Per-send rendering cost of a realistic template, against bare Jinja.

Run with ``python bench/render.py [renders]``. Builds a ~20 KB HTML order-confirmation email
(tables, inline styles, header, footer, a loop over order lines) with 30+ shortcodes, compiles
it once, then times:

* the per-send path through ``templates_store``: cache lookup plus rendering of subject, HTML
  and text in the sandbox;
* bare Jinja: ``jinja2.Environment().from_string(...)`` of the same translated sources,
  compiled once, rendering the same three parts with the same data.

Prints both per-render times in microseconds and their ratio.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jinja2

from templates_store.render import TemplateCache, compile_template, translate

SUBJECT = "Order {{order.number}} confirmed, {{customer.first_name}}!"

_STYLE_CELL = "padding:8px 12px;border-bottom:1px solid #e5e7eb;font-family:Helvetica,Arial"
_ROW = """
        <tr>
          <td style="{cell};width:60px"><img src="{{{{line.image}}}}" width="48" height="48"
              alt="{{{{line.name}}}}" style="display:block;border:0;border-radius:4px"></td>
          <td style="{cell}"><a href="https://shop.example/p/{{{{line.sku}}}}?utm_source=email"
              style="color:#111827;text-decoration:none;font-weight:600">{{{{line.name}}}}</a>
            <div style="color:#6b7280;font-size:12px">SKU {{{{line.sku}}}}
              {{% if line.variant %}}&middot; {{{{line.variant}}}}{{% endif %}}</div></td>
          <td style="{cell};text-align:center">{{{{line.quantity}}}}</td>
          <td style="{cell};text-align:right">{{{{order.currency}}}} {{{{line.price}}}}</td>
          <td style="{cell};text-align:right">{{{{order.currency}}}} {{{{line.total}}}}</td>
        </tr>"""

_FILLER = """
  <tr>
    <td style="padding:16px 32px;font-family:Helvetica,Arial;font-size:14px;line-height:22px;
        color:#374151">
      <h3 style="margin:0 0 8px;font-size:16px;color:#111827">{title}</h3>
      <p style="margin:0 0 12px">{text}</p>
    </td>
  </tr>"""

_LOREM = (
    "Your parcel is prepared in our warehouse and handed to the carrier as soon as every item "
    "has been checked. You will receive a second email with the tracking link once the carrier "
    "has scanned it. Returns are free within thirty days: keep the original packaging and use "
    "the prepaid label included in the box. Questions about sizing, delivery or invoices are "
    "answered by our support team seven days a week. "
)


def build_html() -> str:
    sections = "".join(
        _FILLER.format(title=title, text=_LOREM * 4)
        for title in (
            "What happens next",
            "Delivery",
            "Returns and exchanges",
            "Warranty",
            "Care instructions",
            "Gift cards",
            "Privacy",
            "Sustainability",
        )
    )
    row = _ROW.format(cell=_STYLE_CELL)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Order {{{{order.number}}}}</title>
</head>
<body style="margin:0;padding:0;background:#f3f4f6">
<span style="display:none;max-height:0;overflow:hidden">{{{{preheader}}}}</span>
<table role="presentation" width="100%" cellpadding="0" cellspacing="0" style="background:#f3f4f6">
<tr><td align="center" style="padding:24px 12px">
<table role="presentation" width="600" cellpadding="0" cellspacing="0"
       style="background:#ffffff;border-radius:8px;overflow:hidden">
  <tr>
    <td style="background:{{{{brand.color}}}};padding:24px 32px">
      <a href="{{{{brand.url}}}}?utm_campaign={{{{campaign}}}}"><img src="{{{{brand.logo}}}}"
         alt="{{{{brand.name}}}}" width="140" style="display:block;border:0"></a>
    </td>
  </tr>
  <tr>
    <td style="padding:32px 32px 8px;font-family:Helvetica,Arial;color:#111827">
      <h1 style="margin:0 0 12px;font-size:24px">Thank you, {{{{customer.first_name}}}}!</h1>
      <p style="margin:0;font-size:14px;line-height:22px;color:#374151">
        We received order <strong>{{{{order.number}}}}</strong> on {{{{order.date}}}}.
        {{% if customer.vip %}}As a {{{{customer.tier|upper}}}} member you earned
        {{{{customer.points}}}} points.{{% endif %}}
      </p>
    </td>
  </tr>
  <tr>
    <td style="padding:16px 32px">
      <table role="presentation" width="100%" cellpadding="0" cellspacing="0"
             style="border-collapse:collapse;font-size:14px">
        <tr>
          <th colspan="2" style="{_STYLE_CELL};text-align:left">Item</th>
          <th style="{_STYLE_CELL}">Qty</th>
          <th style="{_STYLE_CELL};text-align:right">Price</th>
          <th style="{_STYLE_CELL};text-align:right">Total</th>
        </tr>
        {{% for line in order.lines %}}{row}
        {{% endfor %}}
        <tr><td colspan="4" style="{_STYLE_CELL};text-align:right">Subtotal</td>
            <td style="{_STYLE_CELL};text-align:right">{{{{order.currency}}}}
            {{{{order.subtotal}}}}</td></tr>
        <tr><td colspan="4" style="{_STYLE_CELL};text-align:right">Shipping
            ({{{{order.shipping_method}}}})</td>
            <td style="{_STYLE_CELL};text-align:right">{{{{order.currency}}}}
            {{{{order.shipping}}}}</td></tr>
        {{% if order.discount %}}<tr><td colspan="4" style="{_STYLE_CELL};text-align:right">
            Discount {{{{order.discount_code}}}}</td><td style="{_STYLE_CELL};text-align:right">
            -{{{{order.currency}}}} {{{{order.discount}}}}</td></tr>{{% endif %}}
        <tr><td colspan="4" style="{_STYLE_CELL};text-align:right;font-weight:700">Total</td>
            <td style="{_STYLE_CELL};text-align:right;font-weight:700">{{{{order.currency}}}}
            {{{{order.total}}}}</td></tr>
      </table>
    </td>
  </tr>
  <tr>
    <td style="padding:16px 32px;font-family:Helvetica,Arial;font-size:14px;color:#374151">
      <h3 style="margin:0 0 8px;font-size:16px;color:#111827">Shipping to</h3>
      <p style="margin:0">{{{{shipping.name}}}}<br>{{{{shipping.street}}}}<br>
        {{{{shipping.postcode}}}} {{{{shipping.city}}}}<br>{{{{shipping.country}}}}</p>
      <p style="margin:12px 0 0">Estimated delivery: {{{{delivery.estimate}}}} by
        {{{{delivery.carrier}}}}.</p>
      <p style="margin:12px 0 0"><a href="{{{{delivery.tracking_url}}}}"
         style="display:inline-block;background:{{{{brand.color}}}};color:#ffffff;
         padding:10px 18px;border-radius:6px;text-decoration:none">Track your order</a></p>
    </td>
  </tr>{sections}
  <tr>
    <td style="padding:24px 32px;background:#f9fafb;font-family:Helvetica,Arial;font-size:12px;
        color:#6b7280;line-height:18px">
      {{{{{{footer_html}}}}}}
      <p style="margin:8px 0 0">{{{{brand.name}}}} &middot; {{{{brand.address}}}}</p>
      <p style="margin:8px 0 0">You receive this email because you ordered with
        {{{{customer.email}}}}. <a href="{{{{unsubscribe_url}}}}" style="color:#6b7280">Email
        preferences</a> &middot; <a href="{{{{support_url}}}}" style="color:#6b7280">Help</a></p>
    </td>
  </tr>
</table>
</td></tr>
</table>
</body>
</html>
"""


TEXT = """Thank you, {{customer.first_name}}!

We received order {{order.number}} on {{order.date}}.
{% for line in order.lines %}
- {{line.quantity}} x {{line.name}} ({{line.sku}}): {{order.currency}} {{line.total}}
{%- endfor %}

Total: {{order.currency}} {{order.total}}
Shipping to {{shipping.name}}, {{shipping.street}}, {{shipping.postcode}} {{shipping.city}}
Track: {{delivery.tracking_url}}

{{brand.name}} - {{brand.address}}
Unsubscribe: {{unsubscribe_url}}
"""


def build_data() -> dict[str, Any]:
    lines = [
        {
            "sku": f"SKU-{n:05d}",
            "name": f"Merino crew sweater <{n}>",
            "variant": "Navy / M" if n % 2 else "",
            "quantity": n % 3 + 1,
            "price": f"{39 + n}.90",
            "total": f"{(39 + n) * (n % 3 + 1)}.70",
            "image": f"https://cdn.shop.example/i/{n}.jpg",
        }
        for n in range(5)
    ]
    return {
        "preheader": "Your order is confirmed",
        "campaign": "order-confirmation",
        "brand": {
            "name": "Example & Co",
            "url": "https://shop.example",
            "logo": "https://cdn.shop.example/logo.png",
            "color": "#1d4ed8",
            "address": "1 Harbour Street, Lisbon",
        },
        "customer": {
            "first_name": "Ana",
            "email": "ana@example.test",
            "vip": True,
            "tier": "gold",
            "points": 120,
        },
        "order": {
            "number": "A-10293",
            "date": "21 November 2026",
            "currency": "EUR",
            "lines": lines,
            "subtotal": "412.30",
            "shipping": "4.90",
            "shipping_method": "Standard",
            "discount": "10.00",
            "discount_code": "WELCOME10",
            "total": "407.20",
        },
        "shipping": {
            "name": "Ana Silva",
            "street": "Rua Augusta 10",
            "postcode": "1100-053",
            "city": "Lisboa",
            "country": "Portugal",
        },
        "delivery": {
            "estimate": "24 November",
            "carrier": "CTT",
            "tracking_url": "https://track.example/A-10293",
        },
        "footer_html": "<p>Follow us on <a href='https://social.example'>Social</a></p>",
        "unsubscribe_url": "https://shop.example/u/abc",
        "support_url": "https://shop.example/help",
    }


def per_call_us(func: Any, renders: int, rounds: int = 7) -> float:
    """Mean time per call in microseconds, the best of ``rounds`` rounds (the least noisy)."""
    timings = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(renders):
            func()
        timings.append((time.perf_counter() - start) / renders * 1e6)
    return min(timings)


def main() -> None:
    renders = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    html = build_html()
    data = build_data()

    start = time.perf_counter()
    compiled = compile_template(SUBJECT, html, TEXT)
    compile_ms = (time.perf_counter() - start) * 1e3

    cache = TemplateCache()
    key = (1, "order-confirmation", 1, "revision")
    cache.put(key, compiled)

    def store_path() -> None:
        cache.get_or_compile(key, lambda: compiled).render(data)

    bare = jinja2.Environment()
    bare_parts = [bare.from_string(translate(source)) for source in (SUBJECT, html, TEXT)]

    def bare_path() -> None:
        for template in bare_parts:
            template.render(data)

    rendered = compiled.render(data)
    per_store = per_call_us(store_path, renders)
    per_bare = per_call_us(bare_path, renders)

    print(f"template: {len(html)} chars of HTML, {len(compiled.shortcodes)} shortcodes")
    print(f"rendered: {len(rendered.body_html or '')} chars of HTML")
    print(f"compile (3 parts, once): {compile_ms:.1f} ms")
    print(f"templates_store per send (cache + 3 parts): {per_store:.1f} us")
    print(f"bare jinja2 per send (3 parts):             {per_bare:.1f} us")
    print(f"ratio: {per_store / per_bare:.2f}x")


if __name__ == "__main__":
    main()
