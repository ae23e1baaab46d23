(on) => { document.body.classList.toggle('presenter', !!on); return on; }
