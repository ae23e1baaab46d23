(on) => { document.body.classList.toggle('full-marks', !!on); return on; }
